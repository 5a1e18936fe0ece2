/**
 * The comparison of a study's variants (src/services/StudyCompare.ts) and the trial metrics it
 * reads (src/services/StudyMetrics.ts), on studies run through the API (MemoryStore, TestClock):
 * built-in runtime metrics of a real run, declared metrics, pairing by case, the exact McNemar
 * test and the paired difference on a study whose answer is known, "insufficient sample", the
 * conclusion's wording with one and several successes, a study where every trial failed.
 */
import { assert, describe, expect, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import { RetryableError } from "../../src/domain/Errors.js"
import type { Json } from "../../src/domain/Json.js"
import * as S from "../../src/domain/Statistics.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import type * as DomainStudy from "../../src/domain/Study.js"
import * as Task from "../../src/domain/Task.js"
import * as Study from "../../src/services/Study.js"
import * as StudyCompare from "../../src/services/StudyCompare.js"
import * as StudyControl from "../../src/services/StudyControl.js"
import * as Suite from "../../src/services/Suite.js"
import { renderStudyPage } from "../../src/services/internal/studyPage.js"
import * as StudyView from "../../src/services/internal/studyView.js"
import { StudyCatalog } from "../../src/services/StudyCatalog.js"
import { SuiteCatalog } from "../../src/services/SuiteCatalog.js"
import { llmPool, makeStudy, studyEnv } from "./studyFixture.js"

// ---------------------------------------------------------------------------------------------
// A hand-made study: per variant, which cases it gets right
// ---------------------------------------------------------------------------------------------

interface HandMade {
  readonly id?: string
  /** Per variant, the cases (0-based) answered correctly. */
  readonly correct: ReadonlyArray<ReadonlySet<number>>
  readonly cases: number
  readonly repeats?: number
  readonly metrics?: ReadonlyArray<DomainStudy.MetricDecl>
  readonly objectives?: ReadonlyArray<Study.StudyObjective & { readonly weight?: number; readonly target?: number }>
  /** Every task first fails once with a 429 (rate_limit), then succeeds; reports usage to a lease. */
  readonly flaky?: boolean
  readonly analysis?: Partial<typeof DomainStudy.DEFAULT_ANALYSIS>
  /** Map the cases in reverse order (the store then holds them in another order). */
  readonly reverse?: boolean
  /** Every output also carries `score`: a pseudo-random number in [0, 1) per (trial, case). */
  readonly noisy?: boolean
  /** Overrides `correct` per trial: whether case `n` of trial `trialId` is answered correctly. */
  readonly correctOf?: (trialId: string, n: number) => boolean | undefined
  /** With `flaky`: the tokens each call of variant number `arm` reports (default 100). */
  readonly tokensOf?: (arm: number) => number
  /** With `flaky`: the cost (US dollars) the call of variant number `arm` on case `n` reports (default none). */
  readonly costOf?: (arm: number, n: number) => number
  /**
   * The outputs of variant number `arm` on case `n`, instead of the default task's (`correct`
   * from `correct` and `usage`): e.g. numbers for `from: { output }` metrics. (The default task's
   * code is left as it is: the pipelines' ids, which the golden pins, hash it.)
   */
  readonly outputsOf?: (arm: number, n: number) => Record<string, number | boolean>
}

/** A pseudo-random number in [0, 1) from a string (FNV-1a then fmix32; deterministic test noise). */
const noise = (s: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0
  // MurmurHash3's fmix32 finalizer: every input bit reaches the high bits
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0
  h = (h ^ (h >>> 16)) >>> 0
  return h / 4294967296
}

const accuracy: DomainStudy.MetricDecl = { name: "accuracy", reducer: "mean", from: { output: "correct" }, unit: "ratio", direction: "maximize" }

const handMade = (o: HandMade) => {
  const id = o.id ?? "hand"
  const repeats = o.repeats ?? 1
  const variants = o.correct.map((_, i): Study.StudyVariant => ({
    id: `v0${i + 1}`,
    assignment: { arm: i },
    key: JSON.stringify({ arm: i }),
    digest: `d${i}`,
    isBaseline: i === 0
  }))
  const trialsFor = (version: number): ReadonlyArray<Study.StudyTrial> =>
    variants.flatMap((variant) => Array.from({ length: repeats }, (_, r) => ({ trialId: `p${version}-${variant.id}-r${r + 1}`, variant, repeat: r + 1 })))
  const seen = new Set<string>()
  const templateOf = (trialId: string, arm: number) =>
    o.outputsOf !== undefined
      ? Pipeline.make("cases", Task.make("outputs", {}, (n: number) => Effect.succeed({ n, ...o.outputsOf!(arm, n) })))
      : Pipeline.make(
      "cases",
      Task.make("answer", { retry: { maxAttempts: 2, base: "1 millis", jitter: "none" } }, (n: number, ctx) =>
        Effect.gen(function*() {
          const k = `${trialId}/${n}`
          if (o.flaky === true && !seen.has(k)) {
            seen.add(k)
            return yield* new RetryableError({ message: "429 Too Many Requests", errorClass: "rate_limit" })
          }
          if (o.flaky === true) {
            yield* Effect.scoped(Effect.gen(function*() {
              const lease = yield* Effect.orDie(ctx.acquire())
              const tokens = o.tokensOf?.(arm) ?? 100
              const costUsd = o.costOf?.(arm, n)
              yield* lease.report({ ok: true, usage: { tokens, promptTokens: tokens * 0.6, completionTokens: tokens * 0.4 }, ...(costUsd === undefined ? {} : { costUsd }) })
            }))
          }
          return {
            n,
            correct: o.correctOf?.(trialId, n) ?? o.correct[arm]!.has(n),
            usage: { promptTokens: 60, completionTokens: 40 },
            ...(o.noisy === true ? { score: noise(`${trialId}/${n}`) } : {})
          }
        }))
    )
  const suiteFor = (version: number): Suite.Suite<any, any, any> => ({
    _tag: "Suite",
    id,
    experiments: trialsFor(version).map((t) => {
      const template = templateOf(t.trialId, t.variant.assignment.arm as number)
      const inputs = Array.from({ length: o.cases }, (_, i) => i)
      return Suite.member(t.trialId, () => template.map(o.reverse === true ? inputs.reverse() : inputs), {
        definitionDigest: t.trialId,
        ...(o.flaky === true ? { poolAliases: { llm: "llm" } } : {})
      })
    }),
    outputRoot: "/study-root",
    layout: "combined",
    pools: o.flaky === true ? [llmPool] : []
  })
  const objectives = o.objectives ?? [{ metric: "accuracy", direction: "maximize" as const }]
  const metrics = o.metrics ?? [accuracy]
  const parts = { experiment: "hand", variables: String(o.correct.length), repeats: String(repeats) }
  const study: Study.StudyInput = {
    id,
    question: "which arm answers best?",
    type: "compare",
    objectives,
    metrics,
    stop: [{ when: "allTrialsTerminal" }],
    protocolDigest: JSON.stringify(parts),
    protocolParts: parts,
    describe: (): Json => ({ parts }),
    trialsFor,
    suiteFor
  }
  const input: StudyCompare.CompareInput = {
    id,
    question: study.question,
    objectives,
    metrics,
    analysis: { resamples: 2000, ...(o.analysis ?? {}) },
    baseline: { id: "v01" },
    variants: variants.map((v) => ({ id: v.id, assignment: v.assignment })),
    repeats
  }
  return { study, input }
}

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i)

// baseline right on 0..27 (28/40); candidate right on 0..25 and 28..39 (38/40):
// discordant pairs b = {26, 27} (baseline right, candidate wrong) = 2, c = 28..39 = 12
const BASE = new Set(range(0, 28))
const CAND = new Set([...range(0, 26), ...range(28, 40)])

/**
 * 30 cases, 5 repeats registered; the baseline keeps repeats 1-3 (4 and 5 re-settled as failed:
 * as if only the candidate had been confirmed). The candidate is right on 27 cases in repeats
 * 1-3 and on 10 in repeats 4-5; the baseline on 25 in every repeat. Its comparison.
 */
const confirmedStudy = Effect.gen(function*() {
  const { input, study } = handMade({
    id: "confirmed",
    correct: [new Set(range(0, 25)), new Set(range(0, 27))],
    cases: 30,
    repeats: 5,
    correctOf: (trialId, n) => trialId.startsWith("p1-v02-r4") || trialId.startsWith("p1-v02-r5") ? n < 10 : undefined
  })
  yield* Study.run(study)
  const catalog = yield* StudyCatalog
  yield* catalog.settle(["p1-v01-r4", "p1-v01-r5"].map((trialId) => ({ trialId, status: "failed" as const, reason: "not run", metrics: null, startedAt: null, endedAt: 1 })), 1)
  return yield* StudyCompare.compare(input)
})

describe("StudyCompare: what a fresh user read wrong (issue 16, tester16 F4, F5, F10)", () => {
  it.effect("one paired repeat of a trial-level metric: a difference without an interval (null bounds, no bracket), \"1 paired repeat\" (F4)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "onerep",
        correct: [new Set(range(0, 20)), new Set(range(0, 25))],
        cases: 30,
        repeats: 1,
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "calls", direction: "minimize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const vs = c.variants[1]!.vsBaseline.calls!
      assert.strictEqual(vs.claim, "repeat")
      assert.strictEqual(vs.paired!.cases, 1)
      assert.strictEqual(vs.paired!.difference.lower, null)
      assert.strictEqual(vs.paired!.difference.upper, null)
      assert.strictEqual(vs.paired!.difference.method, "one paired repeat: no interval")
      const line = StudyCompare.versusText(vs, c.level)
      assert.match(line, /^Δ 0 \(one paired repeat: no interval\) over 1 paired repeat \(/)
      assert.notInclude(line, "[")
      assert.notInclude(line, "1 paired repeats")
      // the same difference with a number, and with minRepeats 1 (sufficient): no interval, no claim
      const point = { ...vs.paired!.difference, estimate: -28 }
      assert.strictEqual(StudyCompare.deltaText(point), "Δ -28 (one paired repeat: no interval)")
      const enough = StudyCompare.versusText({ ...vs, paired: { ...vs.paired!, difference: point }, sufficiency: { sufficient: true, reason: null } as any }, c.level)
      assert.include(enough, "no interval: no difference shown")
      assert.notInclude(enough, "excludes")
      // the Study page prints the same words
      assert.include(renderStudyPage(c), "Δ 0 (one paired repeat: no interval)")
    }).pipe(Effect.provide(studyEnv("onerep"))))

  it.effect("below the minimums the current highest-scoring candidate is the top of the ranking only; the rest are \"not ruled out\" (F5)", () =>
    Effect.gen(function*() {
      // v02 > v01 > v03 on accuracy, 6 cases, 1 repeat: below every minimum
      const { input, study } = handMade({ id: "top", correct: [new Set([0, 1, 2, 3]), new Set([0, 1, 2, 3, 4]), new Set([0, 1])], cases: 6, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.strictEqual(c.conclusion.wording, "current highest-scoring candidate")
      assert.deepStrictEqual(c.conclusion.candidates, ["v02"])
      assert.deepStrictEqual(c.conclusion.notRuledOut, ["v01", "v02", "v03"])
      assert.include(c.conclusion.summary, "v02 is the current highest-scoring candidate on point estimates")
      assert.include(c.conclusion.summary, "(not ruled out: v01, v02, v03)")
      const text = StudyCompare.renderText(c)
      assert.include(text, "candidate (current highest-scoring candidate): v02\n")
      assert.include(text, "not ruled out (the sample is below the declared minimums): v01, v02, v03")
      assert.notInclude(text, "candidates (current highest-scoring candidate)")
      assert.include(renderStudyPage(c), `<span id="conclusion-candidates"><span class="mono">v02</span></span>`)
    }).pipe(Effect.provide(studyEnv("top"))))

  it.effect("tied scores share their rank in the Markdown ranking and on the Study page, as in the table (F10.5)", () =>
    Effect.gen(function*() {
      const same = new Set(range(0, 25))
      const { input, study } = handMade({ id: "mdties", correct: [same, same, new Set(range(0, 20))], cases: 30, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants.map((v) => v.rank), [1, 1, 3])
      const md = StudyCompare.renderMarkdown(c)
      assert.include(md, "- rank 1: v01 (1)\n- rank 1: v02 (1)\n- rank 3: v03 (0)")
      assert.notInclude(md, "2. v02")
      const page = renderStudyPage(c)
      assert.include(page, `<li value="1"><span class="mono">v02</span>`)
      assert.include(page, `<li value="3"><span class="mono">v03</span>`)
    }).pipe(Effect.provide(studyEnv("mdties"))))

  it.effect("equal on every pair reads the same on the Study page as in the CLI: Δ 0 (equal on every pair), never Δ +0 [0, 0] (F10.6)", () =>
    Effect.gen(function*() {
      const same = new Set(range(0, 25))
      const { input, study } = handMade({ id: "eq", correct: [same, same], cases: 30, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.include(StudyCompare.versusText(c.variants[1]!.vsBaseline.accuracy!, c.level), "Δ 0 (equal on every pair)")
      const page = renderStudyPage(c)
      assert.include(page, "Δ 0 (equal on every pair)")
      assert.notInclude(page, "Δ +0")
    }).pipe(Effect.provide(studyEnv("eq"))))

  it.effect("a built-in metric's Student's t interval never reaches below 0 (wall time 10, 100, 1000 ms) (F10.3)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "clamp",
        correct: [new Set(range(0, 20)), new Set(range(0, 25))],
        cases: 30,
        repeats: 3,
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "wallMs", direction: "minimize" }]
      })
      yield* Study.run(study)
      const ledger = (yield* StudyCatalog).ledger("clamp")
      for (const [r, ms] of [[1, 10], [2, 100], [3, 1000]] as const) yield* ledger.addUsage(`p1-v01-r${r}`, { calls: 0, tokens: 0, costUsd: 0, timeMs: ms }, 1)
      const c = yield* StudyCompare.compare(input)
      const wall = c.variants[0]!.values.wallMs!
      assert.strictEqual(wall.interval!.lower, 0)
      assert.isAbove(wall.interval!.upper, wall.mean!)
      assert.include(wall.interval!.method, "lower bound truncated at 0")
      assert.include(StudyCompare.renderText(c), `wallMs: ${StudyCompare.fmt(wall.mean)} [0, `)
      // a difference can be negative: it is not truncated
      assert.isBelow(c.variants[1]!.vsBaseline.wallMs!.paired!.difference.lower!, 0)
    }).pipe(Effect.provide(studyEnv("clamp"))))

  it.effect("after a confirmation the paired difference pairs repeats by number: the candidate's repeats 4 and 5 pair with nothing (F8)", () =>
    Effect.gen(function*() {
      // 30 cases, 5 repeats registered; the baseline keeps repeats 1-3 (4 and 5 re-settled as
      // failed: as if only the candidate had been confirmed). The candidate is right on 27 cases
      // in repeats 1-3 and on 10 in repeats 4-5; the baseline on 25 in every repeat.
      const c = yield* confirmedStudy
      const v02 = c.variants[1]!
      // the variant's own value uses every repeat: (3 × 27 + 2 × 10) / 150
      assert.closeTo(v02.values.accuracy!.mean!, 101 / 150, 1e-12)
      // the paired difference only repeats 1-3: 27/30 − 25/30, won on cases 25 and 26
      const vs = v02.vsBaseline.accuracy!
      assert.closeTo(vs.paired!.difference.estimate, 2 / 30, 1e-12)
      assert.deepStrictEqual([vs.paired!.candidateWins, vs.paired!.baselineWins, vs.paired!.ties], [2, 0, 28])
      assert.deepStrictEqual([vs.mcnemar!.b, vs.mcnemar!.c], [0, 2])
      // the Pareto front reads the same pairing: v02 is not dominated by v01 beyond noise
      assert.isTrue(v02.pareto.uncertain)
    }).pipe(Effect.provide(studyEnv("confirmed"))))

  it.effect("after a confirmation the evidence's per-case differences pair the repeats both have: their mean is the paired difference (tester16g F2)", () =>
    Effect.gen(function*() {
      // as above: v02 has repeats 1-5, v01 1-3; the paired difference is over 1-3 (2/30)
      const c = yield* confirmedStudy
      const { input } = handMade({ id: "confirmed", correct: [new Set(range(0, 25)), new Set(range(0, 27))], cases: 30, repeats: 5 })
      const e = yield* StudyCompare.evidence(input, "accuracy", "v02", { worst: 30, best: 30 })
      const byCase = new Map([...e.worstCases, ...e.bestCases].map((x) => [x.caseKey, x]))
      assert.strictEqual(byCase.size, 30)
      const diffs = [...byCase.values()].map((x) => x.baseline!.difference)
      assert.closeTo(S.mean(diffs), c.variants[1]!.vsBaseline.accuracy!.paired!.difference.estimate, 1e-12)
      assert.closeTo(S.mean(diffs), 2 / 30, 1e-12)
      // the listed value (and ranking) stays v02's own over its 5 repeats; the paired value beside it
      const case0 = [...byCase.values()].find((x) => x.pipelineIds.length === 5 && x.value === 1)!
      assert.strictEqual(case0.baseline!.variantValue, 1)
      const case26 = [...byCase.values()].find((x) => S.nearlyEqual(x.value, 0.6) && x.baseline!.value === 0)!
      assert.strictEqual(case26.baseline!.variantValue, 1)
      assert.closeTo(case26.baseline!.difference, 1, 1e-12)
      assert.strictEqual(case26.baseline!.pipelineIds.length, 3)
      assert.deepStrictEqual(e.pairing, { baselineId: "v01", repeats: [1, 2, 3], variantRepeats: [1, 2, 3, 4, 5], baselineRepeats: [1, 2, 3] })
      const text = StudyCompare.renderEvidence(e)
      assert.include(text, "paired with the baseline v01 over repeats 1–3 (the repeats both have; v02 has 1–5, v01 1–3)")
      assert.match(text, /\n {4}baseline v01: 0 \(v02 1 over the paired repeats, Δ \+1\) · /)
      // the same repeats on both sides: no pairing note, no second value
      const same = yield* StudyCompare.evidence(input, "accuracy", "v01", { worst: 3 })
      assert.isUndefined(same.pairing)
    }).pipe(Effect.provide(studyEnv("confirmed"))))

  it.effect("after a confirmation both Pareto fronts compare each pair over the repeats both have, and the report says so (issue 16, N2)", () =>
    Effect.gen(function*() {
      // as above: over repeats 1-3 v02 (27/30) beats v01 (25/30); its confirmation repeats 4
      // and 5 (10/30 each) pull its mean over 5 repeats (101/150) below v01's
      const c = yield* confirmedStudy
      const [v01, v02] = c.variants
      // the shared repeats decide: v02 is on the point-estimate front and dominates v01 there
      assert.isTrue(v02!.pareto.strict)
      assert.deepStrictEqual(v02!.pareto.dominatedBy, { strict: [], uncertain: [] })
      assert.isFalse(v01!.pareto.strict)
      assert.deepStrictEqual(v01!.pareto.dominatedBy.strict, ["v02"])
      assert.include(
        c.conclusion.limitations.join("\n"),
        "the variants do not have the same repeats (3 compared repeats for v01; 5 compared repeats for v02): a variant's value is its mean over all its repeats, but the Pareto fronts and the paired differences compare each pair over the repeats both have (paired by repeat number)"
      )
    }).pipe(Effect.provide(studyEnv("confirmed"))))

  it.effect("one objective below the minimums, another above: the conclusion names the short one and lets the other's comparison stand (issue 16, N5)", () =>
    Effect.gen(function*() {
      // 20 cases (< 30 paired cases) for accuracy; tokens is per trial, with 3 repeats (>= 3)
      const { input, study } = handMade({
        id: "perobjective",
        correct: [new Set(range(0, 10)), new Set(range(0, 15))],
        cases: 20,
        repeats: 3,
        flaky: true,
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "tokens", direction: "minimize" }]
      })
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      yield* fiber.await.pipe(Effect.flatten)
      const c = yield* StudyCompare.compare(input)
      assert.include(
        c.conclusion.summary,
        "the sample is below the declared minimums on accuracy, so no variant is shown better than another on it (not ruled out: v01, v02); on tokens the comparisons shown above stand"
      )
      assert.notInclude(c.conclusion.summary, "than another (")
    }).pipe(Effect.provide(studyEnv("perobjective"))))

  it.effect("a target objective: the paired line counts higher / lower per case, never \"better\", and says the distance to the target is judged elsewhere (issue 16, N4)", () =>
    Effect.gen(function*() {
      // baseline 28/40 = 0.7, candidate 38/40 = 0.95, target 0.75: the candidate is right on 12
      // more cases yet further from the target
      const { input, study } = handMade({
        id: "target",
        correct: [BASE, CAND],
        cases: 40,
        objectives: [{ metric: "accuracy", direction: "target", target: 0.75 }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const vs = c.variants[1]!.vsBaseline.accuracy!
      assert.strictEqual(vs.target, 0.75)
      const line = StudyCompare.versusText(vs, c.level)
      assert.include(line, "(candidate higher in 12, lower in 2, ties 26; per case, not toward the target 0.75: the variants' values and the Pareto front judge the distance to it)")
      assert.notInclude(line, "better")
      // the front agrees: the baseline (0.05 from the target) dominates the candidate (0.2)
      assert.deepStrictEqual(c.variants[1]!.pareto.dominatedBy.strict, ["v01"])
    }).pipe(Effect.provide(studyEnv("target"))))

  it.effect("evidence of a variant whose every trial broke the hard constraint lists its cases, marked not compared, with the breach (F9); the text lists 3 pipelines per trial (F10.10)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "breakers",
        correct: [new Set(range(0, 28)), new Set(range(0, 15))],
        cases: 30,
        repeats: 2,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.8 } }]
      })
      yield* Study.run(study)
      const e = yield* StudyCompare.evidence(input, "accuracy", "v02", { worst: 2, best: 1 })
      assert.isTrue(e.trials.every((t) => !t.compared))
      assert.deepStrictEqual(e.notCompared!.trials, ["p1-v02-r1", "p1-v02-r2"])
      assert.include(e.notCompared!.breaches.join("\n"), "accuracy >= 0.8 broken: 0.5000")
      // its worst cases are the ones it gets wrong (15..29: value 0), its best one right (value 1)
      assert.deepStrictEqual(e.worstCases.map((c) => c.value), [0, 0])
      assert.strictEqual(e.worstCases[0]!.pipelineIds.length, 2)
      assert.deepStrictEqual(e.bestCases.map((c) => c.value), [1])
      const text = StudyCompare.renderEvidence(e)
      assert.include(text, "cases of trials p1-v02-r1, p1-v02-r2, not compared (")
      assert.notInclude(text, "(no per-case values)")
      // its value says why there is none, never "across 0 repeats" (tester16b N6)
      assert.include(text, "no compared repeat: every trial with a value broke the hard constraint accuracy >= 0.8")
      assert.notInclude(text, "across 0 repeats")
      // one dash for the missing value, then the reason (tester16e F6: never "value: — —")
      assert.match(text, /\nvalue: — \(per repeat: [^\n]*; no compared repeat: every trial with a value broke the hard constraint accuracy >= 0\.8\)\n/)
      assert.notInclude(text, "— —")
      // 30 pipelines per trial: 3 ids, then the count of the rest
      assert.include(text, "… and 27 more (--json lists every pipeline)")
      assert.strictEqual(e.trials[0]!.pipelines.length, 30)
      // a compared variant's evidence is unchanged: no notCompared
      const ok = yield* StudyCompare.evidence(input, "accuracy", "v01")
      assert.isUndefined(ok.notCompared)
    }).pipe(Effect.provide(studyEnv("breakers"))))

  it.effect("one successful trial: the limitation does not deny the interval over its cases the report prints (F10.2)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "single", correct: [new Set(range(0, 20))], cases: 30, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.isNotNull(c.variants[0]!.values.accuracy!.interval)
      assert.notInclude(c.conclusion.limitations.join("\n"), "no comparison, no interval")
      assert.include(c.conclusion.limitations.join("\n"), "one successful trial: no comparison between variants and no spread between repeats (an interval shown resamples its cases only)")
    }).pipe(Effect.provide(studyEnv("single"))))
})

describe("StudyCompare.compare: paired comparison on a study whose answer is known", () => {
  it.effect("the paired difference, the wins and the exact McNemar test of 2 vs 12 discordant cases", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [BASE, CAND], cases: 40 })
      const report = yield* Study.run(study)
      assert.strictEqual(report.status, "completed")
      // settlement computed the declared metric
      assert.closeTo(report.trials.find((t) => t.trialId === "p1-v02-r1")!.metrics.accuracy!, 38 / 40, 1e-12)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const v02 = c.variants.find((v) => v.variantId === "v02")!
      assert.closeTo(v02.values.accuracy!.mean!, 0.95, 1e-12)
      assert.deepStrictEqual(v02.values.accuracy!.perRepeat, [0.95])
      const vs = v02.vsBaseline.accuracy!
      assert.strictEqual(vs.claim, "case")
      assert.strictEqual(vs.paired!.cases, 40)
      assert.closeTo(vs.paired!.difference.estimate, 0.25, 1e-12)
      assert.deepStrictEqual([vs.paired!.candidateWins, vs.paired!.baselineWins, vs.paired!.ties], [12, 2, 26])
      assert.isTrue(vs.sufficiency.sufficient)
      // exact two-sided binomial: 2 × P(X <= 2 | n = 14, p = 1/2) = 2 × (1 + 14 + 91) / 2^14
      assert.deepStrictEqual([vs.mcnemar!.b, vs.mcnemar!.c], [2, 12])
      assert.closeTo(vs.mcnemar!.pValue, (2 * 106) / 16384, 1e-9)
      assert.isTrue(vs.paired!.difference.lower! > 0)
      const text = StudyCompare.versusText(vs, c.level)
      assert.include(text, "significant at 95%")
      assert.notInclude(text, "insufficient")
      // the baseline is not compared with itself
      assert.deepStrictEqual(c.variants[0]!.vsBaseline, {})
      // the evidence: the two cases the candidate gets wrong are its worst
      const worst = v02.evidence.accuracy!.worstCases
      assert.deepStrictEqual(worst.slice(0, 2).map((w) => w.value), [0, 0])
      assert.strictEqual(worst[0]!.pipelineIds.length, 1)
      assert.deepStrictEqual(v02.evidence.accuracy!.trials, ["p1-v02-r1"])
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("every case alike (all right): the evidence says it is a tie and lists no arbitrary worst or best case (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [new Set(range(0, 40)), CAND], cases: 40 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const base = c.variants.find((v) => v.variantId === "v01")!.evidence.accuracy!
      assert.deepStrictEqual(base.tie, { value: 1, cases: 40 })
      assert.deepStrictEqual([base.worstCases, base.bestCases], [[], []])
      // a variant with a worse case keeps its lists
      const v02 = c.variants.find((v) => v.variantId === "v02")!.evidence.accuracy!
      assert.isUndefined(v02.tie)
      assert.strictEqual(v02.worstCases[0]!.value, 0)
      const text = StudyCompare.renderText(c)
      assert.include(text, "    accuracy: all 40 cases have the value 1: a tie, no worst or best cases")
      assert.notMatch(text, /accuracy worst: [^\n]* 1; /)
      const e = yield* StudyCompare.evidence(input, "accuracy", "v01", { seed: 7 })
      assert.deepStrictEqual(e.tie, { value: 1, cases: 40 })
      const shown = StudyCompare.renderEvidence(e)
      assert.include(shown, "worst and best cases: all 40 cases have the value 1: a tie, no worst or best cases")
      assert.notInclude(shown, "worst cases:\n")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("analyse: the comparison of compare and the evidence of evidence, read without recomputing", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [BASE, CAND], cases: 40 })
      yield* Study.run(study)
      const a = yield* StudyCompare.analyse(input, { seed: 7 })
      assert.deepStrictEqual(a.comparison, yield* StudyCompare.compare(input, { seed: 7 }))
      assert.deepStrictEqual(yield* a.evidence("accuracy", "v02"), yield* StudyCompare.evidence(input, "accuracy", "v02", { seed: 7 }))
      const unknown = yield* Effect.flip(a.evidence("acuracy", "v02"))
      assert.include(unknown.message, "did you mean \"accuracy\"")
      // a variant written without its zero padding
      const unpadded = yield* Effect.flip(a.evidence("accuracy", "v2"))
      assert.include(unpadded.message, "unknown variant \"v2\" (did you mean \"v02\"?)")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("the served study's cache: one comparison while the study's rows do not change, a new one when a trial row does", () =>
    Effect.gen(function*() {
      const { study } = handMade({ correct: [BASE, CAND], cases: 40 })
      yield* Study.run(study)
      const catalog = yield* StudyCatalog
      const cache = StudyView.makeCache({ study: catalog, catalog: yield* SuiteCatalog, studyId: "hand" })
      const first = yield* cache.get
      assert.isTrue(first._tag === "Some")
      assert.strictEqual(yield* cache.get, first, "the same analysis, not recomputed")
      yield* catalog.settle([{ trialId: "p1-v02-r1", status: "failed", reason: "re-settled", metrics: null, startedAt: null, endedAt: 1 }], 1)
      const after = yield* cache.get
      assert.notStrictEqual(after, first)
      assert.isTrue(after._tag === "Some" && after.value.comparison.variants[1]!.succeeded === 0, "the re-settled trial is no longer compared")
      const none = StudyView.makeCache({ study: catalog, catalog: yield* SuiteCatalog, studyId: "never-ran" })
      assert.strictEqual((yield* none.get)._tag, "None")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("below 30 paired cases: \"insufficient sample\", no McNemar test, no significance statement", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [new Set(range(0, 4)), new Set(range(0, 12))], cases: 12 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const vs = c.variants[1]!.vsBaseline.accuracy!
      assert.isFalse(vs.sufficiency.sufficient)
      assert.strictEqual(vs.sufficiency.reason, "insufficient sample: 12 paired cases (< 30)")
      assert.isNull(vs.mcnemar)
      assert.strictEqual(vs.paired!.cases, 12)
      const text = StudyCompare.versusText(vs, c.level)
      assert.include(text, "insufficient sample: 12 paired cases (< 30) (no significance statement)")
      assert.notMatch(text, /significant at|excludes 0|p = /)
      const report = StudyCompare.renderText(c)
      assert.notMatch(report, /significant at|excludes 0/)
      assert.include(c.conclusion.limitations.join("\n"), "v02 vs v01 on accuracy: insufficient sample: 12 paired cases (< 30): no significance statement")
      // a minimum declared by the study (analysis.minPairedCases) is the one applied
      const lower = yield* StudyCompare.compare({ ...input, analysis: { minPairedCases: 10 } })
      assert.isTrue(lower.variants[1]!.vsBaseline.accuracy!.sufficiency.sufficient)
      assert.isNotNull(lower.variants[1]!.vsBaseline.accuracy!.mcnemar)
      assert.strictEqual(lower.minPairedCases, 10)
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("cases pair across variants and repeats by their source row; trial-level metrics compare repeats", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        correct: [BASE, CAND],
        cases: 40,
        repeats: 2,
        metrics: [accuracy, { name: "hits", reducer: "sum", from: { output: "correct" } }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const v02 = c.variants[1]!
      assert.strictEqual(v02.vsBaseline.accuracy!.paired!.cases, 40)
      // the unit of the test is the case, not the (case, repeat) pair: the two identical repeats
      // leave 2 vs 12 discordant cases, as with one repeat
      assert.deepStrictEqual([v02.vsBaseline.accuracy!.mcnemar!.b, v02.vsBaseline.accuracy!.mcnemar!.c], [2, 12])
      assert.deepStrictEqual(v02.values.hits!.perRepeat, [38, 38])
      // a trial-level statistic of per-pipeline values (a sum) is compared over resampled cases
      // (issue 16 review: not over its 2 repeat values), its wins counted per case
      const hits = v02.vsBaseline.hits!
      assert.strictEqual(hits.claim, "case")
      assert.strictEqual(hits.paired!.cases, 40)
      assert.strictEqual(hits.paired!.difference.estimate, 10)
      assert.deepStrictEqual([hits.paired!.candidateWins, hits.paired!.baselineWins, hits.paired!.ties], [12, 2, 26])
      assert.include(hits.paired!.difference.method, "paired percentile bootstrap over cases (the trial's sum recomputed per repeat")
      // ...widened by the spread of the per-repeat differences (issue 16, t16c): the trial is
      // measured once per repeat, so with 2 repeats (< 3) no claim is made on it
      assert.include(hits.paired!.difference.method, "spread of the 2 per-repeat differences")
      assert.isFalse(hits.sufficiency.sufficient)
      assert.strictEqual(hits.sufficiency.reason, "insufficient sample: 2 repeats (< 3)")
      assert.strictEqual(c.metrics.find((m) => m.name === "hits")!.level, "trial")
      // a value only the trial has (tokensIn) compares its repeats: Student's t, a repeat-level claim
      const tokens = v02.vsBaseline.tokensIn!
      assert.strictEqual(tokens.claim, "repeat")
      assert.strictEqual(tokens.paired!.cases, 2)
      assert.strictEqual(tokens.sufficiency.reason, "insufficient sample: 2 repeats (< 3)")
      // the JSON form parses back to the same value
      assert.deepStrictEqual(JSON.parse(JSON.stringify(c)), c)
    }).pipe(Effect.provide(studyEnv("hand"))))
})

describe("StudyMetrics: built-in runtime metrics of a real run", () => {
  it.effect("calls, tokens, tokensIn/Out, costUsd, wallMs, latencyP95Ms, retries and rateLimited per trial", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        correct: [BASE, CAND],
        cases: 5,
        flaky: true,
        objectives: [
          { metric: "accuracy", direction: "maximize" },
          { metric: "tokens", direction: "minimize", hardConstraint: { op: "<=", value: 1000 } }
        ]
      })
      const fiber = yield* Effect.fork(Study.run(study))
      // the retry waits 1 ms of TestClock per task
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      const report = yield* fiber.await.pipe(Effect.flatten)
      assert.strictEqual(report.status, "completed")
      // settlement stored the objective's built-in metric
      assert.strictEqual(report.trials[0]!.metrics.tokens, 500)
      const c = yield* StudyCompare.compare(input)
      const v = c.variants[0]!.values
      assert.deepStrictEqual(v.calls!.perRepeat, [5])
      assert.deepStrictEqual(v.tokens!.perRepeat, [500])
      assert.deepStrictEqual(v.tokensIn!.perRepeat, [300])
      assert.deepStrictEqual(v.tokensOut!.perRepeat, [200])
      assert.deepStrictEqual(v.retries!.perRepeat, [5])
      assert.deepStrictEqual(v.rateLimited!.perRepeat, [5])
      // the hand-made model has no price: its calls are unpriced, so the cost is unknown (no value), never $0
      assert.deepStrictEqual(v.costUsd!.perRepeat, [null])
      assert.include(v.costUsd!.aggregation, "5 calls had tokens but no price")
      assert.isTrue(c.conclusion.limitations.some((l) => l.startsWith("costUsd: ") && l.includes("no price")))
      assert.isNumber(v.wallMs!.perRepeat[0])
      assert.isNumber(v.latencyP95Ms!.perRepeat[0])
      for (const m of ["calls", "tokensIn", "tokensOut", "tokens", "costUsd", "wallMs", "latencyP95Ms", "retries", "rateLimited"]) {
        const d = c.metrics.find((x) => x.name === m)!
        assert.strictEqual(d.level, "trial", m)
        assert.strictEqual(d.direction, "minimize", m)
      }
    }).pipe(Effect.provide(studyEnv("hand"))))
})

describe("StudyCompare: the conclusion", () => {
  it.effect("one successful trial: the current highest-scoring candidate, never a best", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good"], repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare({ ...study, baseline: { id: "v01" }, variants: [{ id: "v01", assignment: { quality: "good", index: 0 } }] })
      assert.strictEqual(c.conclusion.wording, "current highest-scoring candidate")
      assert.deepStrictEqual(c.conclusion.candidates, ["v01"])
      const text = StudyCompare.renderText(c)
      assert.include(text, "v01 is the current highest-scoring candidate")
      // from the Run section on, no "best" but the evidence's "best cases"
      assert.notMatch(text.slice(text.indexOf("RUN")).replaceAll("best cases", ""), /\bbest\b/)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("several successes: the Pareto candidates, \"best for the declared objectives and constraints\"", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["bad", "good"], repeats: 2 })
      yield* Study.run(study)
      // 3 cases: the minimums lowered to what this study has (else: "current highest-scoring candidate")
      const c = yield* StudyCompare.compare({
        ...study,
        analysis: { minPairedCases: 3, minRepeats: 2 },
        baseline: { id: "v01" },
        variants: [{ id: "v01", assignment: { quality: "bad" } }, { id: "v02", assignment: { quality: "good" } }]
      })
      assert.strictEqual(c.conclusion.wording, "best for the declared objectives and constraints")
      assert.deepStrictEqual(c.conclusion.candidates, ["v02"])
      assert.deepStrictEqual(c.variants.map((v) => [v.variantId, v.pareto.strict, v.rank]), [["v01", false, 2], ["v02", true, 1]])
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        // every "best" is qualified
        const body = text.slice(text.search(/RUN|## Run/))
        for (const m of body.matchAll(/\bbest\b.{0,45}/g)) assert.match(m[0], /^best (for the declared objectives and constraints|cases)/)
      }
      // a reported metric (ctx.reportMetric) named by an objective is compared per case
      assert.strictEqual(c.metrics.find((m) => m.name === "accuracy")!.kind, "reported")
      assert.strictEqual(c.metrics.find((m) => m.name === "accuracy")!.level, "case")
      assert.closeTo(c.variants[1]!.vsBaseline.accuracy!.paired!.difference.estimate, 0.4, 1e-12)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("every trial failed: no candidate and no best", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["broken", "broken"], repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare({
        ...study,
        baseline: { id: "v01" },
        variants: [{ id: "v01", assignment: {} }, { id: "v02", assignment: {} }]
      })
      assert.strictEqual(c.conclusion.status, "failed")
      assert.strictEqual(c.conclusion.wording, "no candidate")
      assert.deepStrictEqual(c.conclusion.candidates, [])
      assert.deepStrictEqual(c.variants.map((v) => [v.succeeded, v.pareto.strict, v.rank]), [[0, false, null], [0, false, null]])
      assert.include(c.conclusion.summary, "no candidate and no best")
      assert.match(StudyCompare.renderText(c), /p1-v01-r1: failed \(.*\) — not compared/)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a hard constraint on a declared metric fails the trial at settlement; breakers are listed, never compared", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        correct: [BASE, CAND],
        cases: 40,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.9 } }]
      })
      const report = yield* Study.run(study)
      assert.deepStrictEqual(report.trials.map((t) => [t.trialId, t.status]), [["p1-v01-r1", "failed"], ["p1-v02-r1", "succeeded"]])
      assert.include(report.trials[0]!.reason, "hard constraint accuracy >= 0.9 broken: 0.7")
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants[0]!.breaches, ["p1-v01-r1: hard constraint accuracy >= 0.9 broken: 0.7000"])
      assert.strictEqual(c.variants[0]!.succeeded, 0)
      assert.isNull(c.variants[1]!.vsBaseline.accuracy!.paired)
      assert.strictEqual(c.conclusion.wording, "current highest-scoring candidate")
      assert.deepStrictEqual(c.conclusion.candidates, ["v02"])
      assert.include(c.conclusion.limitations.join("\n"), "the baseline v01 has no successful trial: no paired comparison")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a study that never ran in the root, or a negative seed, is a ConfigError at its path", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good"] })
      const e = yield* Effect.flip(StudyCompare.compare({ ...study, baseline: { id: "v01" }, variants: [] }))
      assert.strictEqual(e._tag, "ConfigError")
      assert.strictEqual(e._tag === "ConfigError" ? e.issues[0]!.path : "", "study.id")
      yield* Study.run(study)
      const seed = yield* Effect.flip(StudyCompare.compare({ ...study, baseline: { id: "v01" }, variants: [] }, { seed: -1 }))
      assert.strictEqual(seed._tag === "ConfigError" ? seed.issues[0]!.path : "", "--seed")
    }).pipe(Effect.provide(studyEnv("demo"))))
})

/** The Study page's two Pareto cells of a variant's row in the Compare table. */
const paretoCells = (page: string, id: string): string =>
  page.split(`<tr data-variant="${id}">`).slice(1).map((r) => r.slice(0, r.indexOf("</tr>"))).find((r) => r.includes("pareto-strict")) ?? ""

describe("StudyCompare: the report is a pinned function of the stored study", () => {
  // A golden file written by the code before StudyMetrics.read was rewritten for memory
  // (columns, compact pipeline ids, one trial at a time): the comparison, its text and an
  // evidence listing of a fixed study must stay byte for byte the same.
  it.effect("the JSON comparison, the text report and the evidence of a 3-variant, 3-repeat study", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "golden",
        correct: [BASE, CAND, new Set(range(5, 40))],
        cases: 40,
        repeats: 3,
        flaky: true,
        metrics: [
          accuracy,
          { name: "wrongRate", reducer: "rate", from: { output: "correct" }, equals: false, direction: "minimize" },
          { name: "caseP95", reducer: "p95", from: { output: "n" } }
        ],
        objectives: [
          { metric: "accuracy", direction: "maximize" },
          { metric: "tokensIn", direction: "minimize", weight: 0.5 }
        ]
      })
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 200; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      const report = yield* fiber.await.pipe(Effect.flatten)
      assert.strictEqual(report.status, "completed")
      const c = yield* StudyCompare.compare(input, { seed: 11 })
      const e = yield* StudyCompare.evidence(input, "accuracy", "v03", { seed: 11, worst: 3, best: 2 })
      const golden = [JSON.stringify(c), StudyCompare.renderText(c), StudyCompare.renderMarkdown(c), JSON.stringify(e), StudyCompare.renderEvidence(e)].join("\n")
      yield* Effect.promise(() => expect(golden).toMatchFileSnapshot("__snapshots__/StudyCompare.golden.txt"))
      // the dashboard's study page names who dominates a variant, in both Pareto columns
      const page = renderStudyPage(c)
      // the compare table's row (the design table lists the variants too, without Pareto cells)
      const row = (id: string) =>
        page.split(`<tr data-variant="${id}">`).slice(1).map((r) => r.slice(0, r.indexOf("</tr>"))).find((r) => r.includes("pareto-strict")) ?? ""
      assert.include(row("v01"), `<td class="pareto-strict">no <span class="by">(dominated by v02, v03)</span></td>`)
      assert.include(row("v01"), `<td class="pareto-uncertain">no <span class="by">(dominated by v02)</span><div class="why muted">v02 over v01: accuracy Δ +0.2500 [0.01444, 0.4856]: v02 ahead beyond noise; tokensIn equal</div>`)
      // tester16g F6: the text and Markdown cell says whose dominators are whose, as the two columns do
      assert.include(StudyCompare.renderText(c), "Pareto: dominated beyond noise by v02; on the point estimates by v02, v03;")
      assert.include(StudyCompare.renderMarkdown(c), "| dominated beyond noise by v02; on the point estimates by v02, v03 |")
      assert.include(row("v03"), `<td class="pareto-strict">no <span class="by">(dominated by v02)</span></td><td class="pareto-uncertain">yes</td>`)
      assert.include(row("v02"), `<td class="pareto-strict">yes</td><td class="pareto-uncertain">yes</td>`)
    }).pipe(Effect.provide(studyEnv("golden"))))
})

describe("StudyCompare: a lead within noise is a tie on the uncertainty-aware front (fix16ac F1, F2)", () => {
  it.effect("v02 right on every case, its score higher than the baseline's within noise: the baseline is dominated beyond noise, on the strict front only, and the report says why", () =>
    Effect.gen(function*() {
      const score: DomainStudy.MetricDecl = { name: "score", reducer: "mean", from: { output: "score" }, unit: "ratio", direction: "minimize" }
      // v01 right on half of the 30 cases, v02 on all; the score is noise (v02's mean 0.4933 > v01's 0.4869)
      const { input, study } = handMade({ id: "tie", correct: [new Set(range(0, 15)), new Set(range(0, 30))], cases: 30, repeats: 3, noisy: true, metrics: [accuracy, score], objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "score", direction: "minimize" }] })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const [v01, v02] = c.variants
      assert.isAbove(v02!.values.score!.mean!, v01!.values.score!.mean!)
      // on point estimates v01's lower score keeps it; beyond noise it is a tie, and v02 is better on accuracy
      assert.deepStrictEqual([v01!.pareto.strict, v01!.pareto.uncertain], [true, false])
      assert.deepStrictEqual(v01!.pareto.dominatedBy, { strict: [], uncertain: ["v02"] })
      assert.deepStrictEqual([v02!.pareto.strict, v02!.pareto.uncertain], [true, true])
      assert.deepStrictEqual(c.conclusion.candidates, ["v02"])
      assert.deepStrictEqual(c.conclusion.pointEstimateFront, ["v01", "v02"])
      assert.include(c.conclusion.summary, "the Pareto candidate, best for the declared objectives and constraints, is v02: no other variant beats it beyond the intervals; on point estimates alone the front is v01, v02 (v01 is on it by a lead within noise only")
      // F2: the deciding comparison, objective by objective, in JSON and in words
      const deciding = v01!.pareto.deciding!
      assert.strictEqual(deciding.length, 1)
      assert.strictEqual(deciding[0]!.by, "v02")
      const [acc, sc] = deciding[0]!.objectives
      assert.deepStrictEqual([acc!.metric, acc!.beyondNoise, acc!.basis], ["accuracy", true, "paired"])
      assert.closeTo(acc!.difference!.estimate, 0.5, 1e-12)
      assert.isAbove(acc!.difference!.lower, 0)
      assert.deepStrictEqual([sc!.metric, sc!.beyondNoise, sc!.basis], ["score", false, "paired"])
      assert.isAbove(sc!.difference!.estimate, 0)
      assert.isBelow(sc!.difference!.lower, 0)
      assert.include(sc!.difference!.method, "widened for 2 comparisons")
      assert.isUndefined(v02!.pareto.deciding)
      const text = StudyCompare.renderText(c)
      assert.include(text, "Pareto: dominated beyond noise by v02 (on the strict front by a lead within noise only)")
      // tester16g F5: the direction in words (score is minimized: v02's higher score is behind),
      // and what Δ is once per report, not on every line
      assert.match(text, /\n {6}why: v02 over v01: accuracy Δ \+0\.5000 \[[0-9.]+, [0-9.]+\]: v02 ahead beyond noise; score Δ \+[0-9.]+ \[-[0-9.]+, [0-9.]+\]: v02 behind, within noise\n/)
      const note = "Δ is the paired difference dominator − dominated, its interval at 97.5% (widened for 2 comparisons); a lead within noise is a tie"
      assert.strictEqual(StudyCompare.decidingNote(c), note)
      assert.strictEqual(text.split(note).length - 1, 1)
      assert.include(text, `why lines: ${note}`)
      const md = StudyCompare.renderMarkdown(c)
      assert.include(md, `### Why dominated (beyond noise; a lead within noise is a tie)\n\n${note}\n\n- v01: v02 over v01: accuracy Δ +0.5000`)
      assert.include(md, "v02 behind, within noise")
      const page = renderStudyPage(c)
      assert.include(page, `<td class="pareto-strict">yes</td><td class="pareto-uncertain">no <span class="by">(dominated by v02)</span><div class="why muted">v02 over v01: accuracy Δ +0.5000`)
      assert.include(page, `<span id="why-note">Why lines: ${note}.</span>`)
      assert.notInclude(page, "(Δ: paired difference")
    }).pipe(Effect.provide(studyEnv("tie"))))

  it.effect("a target objective's why line shows its target and which side is nearer; an exact tie reads 'equal' (tester16g F5)", () =>
    Effect.gen(function*() {
      const pattern = [-0.3, 0, 0.3, 0.1]
      // a: v01 4 ± noise, v02 5 ± noise around the target 5; b: the same on every case (a tie)
      const { input, study } = handMade({
        id: "target5",
        correct: [BASE, BASE],
        cases: 40,
        repeats: 3,
        outputsOf: (arm, n) => ({ a: (arm === 0 ? 4 : 5) + pattern[n % 4]!, b: 1 }),
        metrics: [
          { name: "a", reducer: "mean", from: { output: "a" }, direction: "target" },
          { name: "b", reducer: "mean", from: { output: "b" }, direction: "minimize" }
        ],
        objectives: [{ metric: "a", direction: "target", target: 5 }, { metric: "b", direction: "minimize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const d = c.variants[0]!.pareto.deciding![0]!
      const line = StudyCompare.decidingText(d, "v01", c.objectives)
      assert.match(line, /^v02 over v01: a v02 5\.\d+ \[[\d.]+, [\d.]+\] vs v01 4\.\d+ \[[\d.]+, [\d.]+\] \(target 5\): v02 ahead beyond noise; b equal$/)
      assert.notInclude(line, "Δ 0 [0, 0]")
      assert.include(StudyCompare.renderText(c), `why: ${line}`)
    }).pipe(Effect.provide(studyEnv("target5"))))
})

describe("StudyCompare: a dominance cycle set aside is said in every view (tester16g F1)", () => {
  it.effect("three variants beating one another in a circle beyond noise: on the front only because of it, never called best; a fourth below them stays dominated", () =>
    Effect.gen(function*() {
      // metric k of variant i is 5 + its level + a per-case pattern -1, 0, 1 shifted by a salt:
      // each of v01, v02, v03 leads the next by 0.9 - 0.45 on one metric (beyond noise) and trails
      // it by 0.45 on the other two (within noise); v04 is below all three everywhere
      const levels = [[0.9, 0.45, 0], [0, 0.9, 0.45], [0.45, 0, 0.9], [-1, -1, -1]]
      const salts = [0, 1, 2, 0]
      const pattern = [-1, 0, 1]
      const m = (name: string): DomainStudy.MetricDecl => ({ name, reducer: "mean", from: { output: name }, direction: "maximize" })
      const { input, study } = handMade({
        id: "cycle",
        correct: [BASE, BASE, BASE, BASE],
        cases: 40,
        repeats: 3,
        outputsOf: (arm, n) => {
          const e = pattern[(n + salts[arm]!) % 3]!
          return { a: 5 + levels[arm]![0]! + e, b: 5 + levels[arm]![1]! + e, c: 5 + levels[arm]![2]! + e }
        },
        metrics: [m("a"), m("b"), m("c")],
        objectives: [{ metric: "a", direction: "maximize" }, { metric: "b", direction: "maximize" }, { metric: "c", direction: "maximize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const [v01, v02, v03, v04] = c.variants
      for (const v of [v01!, v02!, v03!]) {
        assert.isTrue(v.pareto.uncertain)
        assert.deepStrictEqual(v.pareto.cycle, ["v01", "v02", "v03"])
      }
      // v04 is in no cycle: dominated by all three (a dominance from the cycle stands)
      assert.isUndefined(v04!.pareto.cycle)
      assert.deepStrictEqual(v04!.pareto.dominatedBy.uncertain, ["v01", "v02", "v03"])
      assert.deepStrictEqual(c.conclusion.candidates, ["v01", "v02", "v03"])
      assert.deepStrictEqual(c.conclusion.cycles, [["v01", "v02", "v03"]])
      assert.strictEqual(c.conclusion.wording, StudyCompare.WORDING.inseparable)
      // never "best" of them
      assert.notInclude(c.conclusion.summary, "best")
      assert.include(c.conclusion.summary, "v01, v02, v03 cannot be separated: they beat one another in a circle beyond noise")
      const note = "on the front only because v01, v02, v03 beat one another in a circle beyond noise: none of them can be ruled out by the others"
      const text = StudyCompare.renderText(c)
      assert.include(text, `v02: arm=1 — 3 compared trials; Pareto: front (${note})`)
      assert.notInclude(text, StudyCompare.WORDING.best)
      assert.include(text, `candidates (${StudyCompare.WORDING.inseparable}): v01, v02, v03`)
      const md = StudyCompare.renderMarkdown(c)
      assert.include(md, `front (${note})`)
      assert.notInclude(md, StudyCompare.WORDING.best)
      const page = renderStudyPage(c)
      assert.include(page, `<td class="pareto-uncertain">yes<div class="why muted cycle">${note}</div>`)
      assert.include(page, `<span id="conclusion-cycles"><span class="mono">v01</span>, <span class="mono">v02</span>, <span class="mono">v03</span></span>`)
      assert.notInclude(page, StudyCompare.WORDING.best)
      const json = JSON.parse(JSON.stringify(c))
      assert.deepStrictEqual(json.variants[1].pareto.cycle, ["v01", "v02", "v03"])
    }).pipe(Effect.provide(studyEnv("cycle"))))
})

describe("StudyCompare: the why lines say how many are shown; intervals print both ends alike (tester16g F4, F7)", () => {
  it.effect("a variant beaten by 5 others, each better by exactly 2 on every case: 3 why lines and '(3 of 5 shown)'; no [2, 2.000] mix", () =>
    Effect.gen(function*() {
      const pattern = [-0.1, 0, 0.1, 0.7]
      const { input, study } = handMade({
        id: "many",
        correct: [BASE, BASE, BASE, BASE, BASE, BASE],
        cases: 40,
        repeats: 3,
        outputsOf: (arm, n) => ({ a: (arm === 0 ? 1.1 : 3.1) + pattern[n % 4]! }),
        metrics: [{ name: "a", reducer: "mean", from: { output: "a" }, direction: "maximize" }],
        objectives: [{ metric: "a", direction: "maximize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const v01 = c.variants[0]!
      assert.deepStrictEqual(v01.pareto.dominatedBy.uncertain, ["v02", "v03", "v04", "v05", "v06"])
      assert.strictEqual(v01.pareto.deciding!.length, 3)
      const shown = "(3 of 5 shown; not explained: v05, v06)"
      const text = StudyCompare.renderText(c)
      assert.include(text, `      why: ${shown}`)
      assert.include(StudyCompare.renderMarkdown(c), `- v01: ${shown}`)
      assert.include(renderStudyPage(c), `<div class="why muted">${shown}</div>`)
      // the paired differences are 2 on every case, up to float noise: both ends read alike
      for (const view of [text, StudyCompare.renderMarkdown(c), renderStudyPage(c)]) {
        for (const [, lo, hi] of view.matchAll(/\[(-?[\d.]+), (-?[\d.]+)\]/g)) {
          if (Number(lo) === Number(hi)) assert.strictEqual(lo, hi, view)
        }
      }
      assert.include(text, "why: v02 over v01: a Δ +2 [2, 2]: v02 ahead beyond noise")
      // tester16g F6: the same dominators on both fronts: said once, with the fronts named
      assert.include(text, "Pareto: dominated by v02, v03, v04, v05, v06 (on both fronts);")
    }).pipe(Effect.provide(studyEnv("many"))))
})

describe("StudyCompare: the paired test's unit is the case; ties; survivorship (issue 16)", () => {
  it.effect("three identical repeats give the exact McNemar p of one repeat (the case is the unit, repeats are not independent pairs)", () =>
    Effect.gen(function*() {
      const versus = (repeats: number) => {
        const { input, study } = handMade({ correct: [BASE, CAND], cases: 40, repeats })
        return Effect.gen(function*() {
          yield* Study.run(study)
          return (yield* StudyCompare.compare(input, { seed: 3 })).variants[1]!.vsBaseline.accuracy!
        }).pipe(Effect.provide(studyEnv("hand")))
      }
      const single = yield* versus(1)
      const repeated = yield* versus(3)
      assert.deepStrictEqual([repeated.mcnemar!.b, repeated.mcnemar!.c], [single.mcnemar!.b, single.mcnemar!.c])
      assert.strictEqual(repeated.mcnemar!.pValue, single.mcnemar!.pValue)
      assert.closeTo(repeated.mcnemar!.pValue, (2 * 106) / 16384, 1e-12)
      // the discordant counts are the paired wins, printed in their order (candidate first)
      assert.deepStrictEqual([repeated.paired!.candidateWins, repeated.paired!.baselineWins], [12, 2])
      assert.include(StudyCompare.versusText(repeated, 0.95), "(candidate better in 12 vs baseline in 2 discordant cases)")
    }))

  it.effect("a variant that lost a repeat to a hard constraint: a limitation says its value is over the remaining repeats", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        correct: [CAND, CAND],
        cases: 40,
        repeats: 2,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.9 } }]
      })
      yield* Study.run(study)
      // repeat 1 of v02 broke the constraint at settlement (as a run with a worse repeat records it)
      const catalog = yield* StudyCatalog
      yield* catalog.settle([{ trialId: "p1-v02-r1", status: "failed", reason: "hard constraint accuracy >= 0.9 broken: 0.7", metrics: null, startedAt: null, endedAt: 1 }], 1)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants[1]!.values.accuracy!.perRepeat, [null, 0.95])
      const line = "v02: 1 of 2 repeats dropped for breaking accuracy >= 0.9; its value is over the remaining repeats"
      assert.include(c.conclusion.limitations, line)
      assert.notInclude(c.conclusion.limitations.join("\n"), "v01: ")
      assert.include(StudyCompare.renderText(c), line)
      assert.include(StudyCompare.renderMarkdown(c), line)
      assert.include(JSON.stringify(c), line)
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("every constraint kind reads in one notation, as written in the study file (>=, <=, !=, ==), in text and Markdown (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      // six metrics of one field, one hard constraint of each kind, every one met by 0.95
      const ops: ReadonlyArray<readonly [DomainStudy.Op, number]> = [[">", 0.5], [">=", 0.9], ["<", 1.5], ["<=", 1], ["==", 0.95], ["!=", 0.25]]
      const metrics = ops.map((_, i): DomainStudy.MetricDecl => ({ ...accuracy, name: `m${i + 1}` }))
      const { input, study } = handMade({
        correct: [CAND, CAND],
        cases: 40,
        repeats: 2,
        metrics,
        objectives: ops.map(([op, value], i) => ({ metric: `m${i + 1}`, direction: "maximize" as const, hardConstraint: { op, value } }))
      })
      yield* Study.run(study)
      // repeat 1 of v02 recorded as breaking all six (the survivorship limitation names each)
      const written = ops.map(([op, value], i) => `m${i + 1} ${op} ${value}`)
      const catalog = yield* StudyCatalog
      yield* catalog.settle([{ trialId: "p1-v02-r1", status: "failed", reason: `hard constraint ${written.join(", ")} broken`, metrics: null, startedAt: null, endedAt: 1 }], 1)
      const c = yield* StudyCompare.compare(input)
      for (const report of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        assert.notMatch(report, /[≥≤≠]/, report)
        assert.include(report, `v02: 1 of 2 repeats dropped for breaking ${written.join(" / ")}; its value is over the remaining repeats`, report)
        for (const [op, value] of ops) assert.include(report, `[${op} ${value}]`)
      }
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a report of an earlier protocol version says what its status means, never '(an earlier version)' (tester16b N9)", () =>
    Effect.gen(function*() {
      const first = handMade({ id: "versions", correct: [BASE, CAND], cases: 30, repeats: 1 })
      yield* Study.run(first.study)
      const second = handMade({ id: "versions", correct: [BASE, CAND], cases: 30, repeats: 2 })
      yield* Study.run(second.study, { newVersion: true })
      const c = yield* StudyCompare.compare(first.input, { version: 1 })
      assert.isNull(c.run.status)
      assert.strictEqual(c.run.currentVersion, 2)
      const wording = "not recorded for version 1: its trials were settled under protocol version 1 (current 2), and the study's status is version 2's"
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        assert.include(text, `status: ${wording}`)
        assert.notInclude(text, "(an earlier version)")
      }
      // the current version's comparison has its status, and no currentVersion
      const now = yield* StudyCompare.compare(second.input)
      assert.strictEqual(now.run.status, "completed")
      assert.isUndefined(now.run.currentVersion)
    }).pipe(Effect.provide(studyEnv("versions"))))

  it.effect("metrics whose interval methods differ only by their seed share one line (tester16b N8)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "methods",
        correct: [BASE, CAND],
        cases: 40,
        repeats: 2,
        metrics: [
          { name: "accuracy", reducer: "mean", from: { output: "correct" } },
          { name: "wrongRate", reducer: "rate", from: { output: "correct" }, equals: false, direction: "minimize" }
        ],
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "wrongRate", direction: "minimize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const text = StudyCompare.renderText(c)
      const section = text.slice(text.indexOf("interval methods:"), text.indexOf("against the baseline"))
      assert.strictEqual(section.split("\n").filter((l) => l.includes("percentile bootstrap")).length, 1, section)
      assert.include(section, "    accuracy, wrongRate: percentile bootstrap over cases and repeats, 2000 resamples, seeds 1, 2 (one per metric, in that order)")
      assert.include(StudyCompare.renderMarkdown(c), "\n- accuracy, wrongRate: percentile bootstrap")
    }).pipe(Effect.provide(studyEnv("methods"))))

  it.effect("the interval methods name each method once, with what it resamples for which variants (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [BASE, CAND, CAND], cases: 40, repeats: 2 })
      yield* Study.run(study)
      // v03 keeps one compared repeat: its bootstrap resamples its cases only
      const catalog = yield* StudyCatalog
      yield* catalog.settle([{ trialId: "p1-v03-r1", status: "failed", reason: "failed for the test", metrics: null, startedAt: null, endedAt: 1 }], 1)
      const c = yield* StudyCompare.compare(input)
      const line = "accuracy: percentile bootstrap, 2000 resamples, seed 1 (case draws shared by 3 variants): over cases and repeats for v01, v02; over cases for v03"
      assert.include(StudyCompare.renderText(c), `\n    ${line}\n`)
      assert.include(StudyCompare.renderMarkdown(c), `\n- ${line}\n`)
      // the methods themselves (JSON) are untouched
      assert.strictEqual(c.variants[2]!.values.accuracy!.interval!.method, "percentile bootstrap over cases, 2000 resamples, seed 1 (case draws shared by 3 variants)")
      // one method for every variant: named once, with no list of variants
      const { input: same, study: sameStudy } = handMade({ id: "same", correct: [BASE, CAND], cases: 40, repeats: 2 })
      const text = yield* Effect.gen(function*() {
        yield* Study.run(sameStudy)
        return StudyCompare.renderText(yield* StudyCompare.compare(same))
      }).pipe(Effect.provide(studyEnv("same")))
      assert.include(text, "\n    accuracy: percentile bootstrap over cases and repeats, 2000 resamples, seed 1 (case draws shared by 2 variants)\n")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a study past its total budget: the Run section says by how much, and the Study page shows the real use past 100 % (issue 16, N1)", () =>
    Effect.gen(function*() {
      // 2 variants × 4 cases, 100 tokens a case: 800 tokens used, the total (declared after the
      // run) is 400
      const { input, study } = handMade({ correct: [BASE, CAND], cases: 4, flaky: true })
      const fiber = yield* Effect.fork(Study.run(study))
      // the retry waits 1 ms of TestClock per task
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      yield* fiber.await.pipe(Effect.flatten)
      const c = yield* StudyCompare.compare({ ...input, budget: { perTrial: {}, total: { tokens: 400 } } })
      assert.deepStrictEqual(c.run.overTotal, ["tokens 800 of 400, 100% over"])
      assert.include(StudyCompare.renderText(c), "\n  over the total budget: tokens 800 of 400, 100% over\n")
      // the budget line says what was used against each limit (tester16c F12)
      assert.include(StudyCompare.renderText(c), "\n  budget: per trial none; total tokens 400 (used 800, 200%)\n")
      assert.include(StudyCompare.renderMarkdown(c), "\n- budget: per trial none; total tokens 400 (used 800, 200%)\n")
      assert.deepStrictEqual(c.run.highestTrial, { calls: 4, tokens: 400, costUsd: 0, timeMs: c.run.highestTrial!.timeMs })
      const page = renderStudyPage(c)
      assert.include(page, "200% <span class=\"over\">(over the total budget)</span>")
      assert.notInclude(page, "width:200")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("the report's budget line gives each figure its unit; a time under a second reads in ms, never 0.0 s (issue 16 leftovers)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ correct: [BASE, CAND], cases: 4 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare({ ...input, budget: { perTrial: { timeMs: 20, costUsd: 0.5 }, total: { calls: 100, timeMs: 90_000 } } })
      // with what was used against each (tester16c F12): the highest trial's, the study's
      assert.include(StudyCompare.renderText(c), "\n  budget: per trial time 20 ms (highest trial 0 ms, 0%), cost $0.500 (highest trial $0, 0%); total calls 100 (used 0, 0%), time 90.0 s (used 0 ms, 0%)\n")
      // a limit and a use that would read alike get the digits to differ (tester16d F4), at the
      // precision of every study view (3 significant digits, fix16x)
      const tiny = { ...c, run: { ...c.run, budget: { perTrial: { costUsd: 0.00022 }, total: { costUsd: 0.0025 } }, highestTrial: { ...c.run.highestTrial!, costUsd: 0.000238 }, usage: { ...c.run.usage, costUsd: 0.0008 } } }
      assert.include(StudyCompare.renderText(tiny), "\n  budget: per trial cost $0.000220 (highest trial $0.000238, 108%); total cost $0.00250 (used $0.000800, 32%)\n")
      // the Study page's Run tab says the same per-trial use; its empty "not compared" table says none (tester16d F5)
      const page = renderStudyPage(tiny)
      assert.include(page, "<td>$0.000220 (highest trial $0.000238, 108%)</td>")
      // the total cost budget in dollars, as the CLI's line says it, never a bare number (tester16e F6)
      assert.match(page, /<td>cost \(USD\)<\/td><td>[^<]*<\/td><td>\$0\.00250<\/td>/)
      const dollar = renderStudyPage({ ...c, run: { ...c.run, budget: { perTrial: {}, total: { costUsd: 1 } } } })
      assert.match(dollar, /<td>cost \(USD\)<\/td><td>[^<]*<\/td><td>\$1\.00<\/td>/)
      assert.match(page, /<td>time<\/td><td>[^<]*<\/td><td>none<\/td>/)
      assert.include(page, "<tbody id=\"run-excluded\"><tr><td colspan=\"4\">none</td></tr></tbody>")
      assert.strictEqual(StudyControl.figureValue("timeMs", 34), "34 ms")
      assert.strictEqual(StudyControl.figureValue("timeMs", 1500), "1.5 s")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a variant excluded by a hard constraint takes no part in the draws: every metric's method counts the variants resampled together", () =>
    Effect.gen(function*() {
      // v03 answers 10 of 40 (0.25): it breaks accuracy >= 0.75 and none of its trials is compared
      const { input, study } = handMade({
        correct: [CAND, CAND, new Set(range(0, 10))],
        cases: 40,
        metrics: [accuracy, { name: "hits", reducer: "sum", from: { output: "correct" } }],
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.75 } }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants[2]!.trials.map((t) => t.compared), [false])
      for (const metric of ["accuracy", "hits"]) {
        const method = c.variants[0]!.values[metric]!.interval!.method
        assert.include(method, "(case draws shared by 2 variants)", `${metric}: ${method}`)
        assert.include(c.variants[1]!.vsBaseline[metric]!.paired!.difference.method, "(case draws shared by 2 variants)", metric)
      }
      assert.notInclude(StudyCompare.renderText(c), "shared by 3 variants")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a variant whose mean over ALL its repeats breaks a hard constraint is not a candidate, and is not valued over its lucky repeat", () =>
    Effect.gen(function*() {
      // v02: repeat 1 answers 20 of 40 (0.5, breaks >= 0.75 and is dropped), repeat 2 answers 36 (0.9, passes):
      // over both it is 0.7 < 0.75, yet its surviving repeat alone reads 0.9
      const { input, study } = handMade({
        correct: [CAND, CAND],
        cases: 40,
        repeats: 2,
        correctOf: (trialId, n) => trialId === "p1-v02-r1" ? n < 20 : trialId === "p1-v02-r2" ? n < 36 : undefined,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.75 } }],
        analysis: { minPairedCases: 3, minRepeats: 1 }
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const v02 = c.variants[1]!
      assert.deepStrictEqual(v02.trials.map((t) => t.compared), [false, false])
      assert.strictEqual(v02.values.accuracy!.mean, null)
      assert.notInclude(c.conclusion.candidates, "v02")
      assert.deepStrictEqual(c.conclusion.candidates, ["v01"])
      const line = "v02: hard constraint accuracy >= 0.75 broken by the variant: mean 0.7000 over all 2 repeats (the 1 repeat that passed alone read 0.9000: survivorship); no repeat of it is compared"
      assert.include(v02.breaches, line)
      assert.include(c.conclusion.limitations, `${line}: v02 is not a candidate`)
      assert.include(StudyCompare.renderText(c), `${line}: v02 is not a candidate`)
    }).pipe(Effect.provide(studyEnv("hand"))))

  it.effect("a baseline excluded by a hard constraint on its mean: the report says so, not that it has no successful trial (issue 16, t16c)", () =>
    Effect.gen(function*() {
      // the baseline v01: repeat 1 answers 20 of 40 (0.5, dropped), repeat 2 answers 36 (0.9, succeeded): mean 0.7 < 0.75
      const { input, study } = handMade({
        correct: [CAND, CAND],
        cases: 40,
        repeats: 2,
        correctOf: (trialId, n) => trialId === "p1-v01-r1" ? n < 20 : trialId === "p1-v01-r2" ? n < 36 : undefined,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.75 } }],
        analysis: { minPairedCases: 3, minRepeats: 1 }
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const text = c.conclusion.limitations.join("\n")
      assert.notInclude(text, "has no successful trial")
      assert.include(text, "the baseline v01 is excluded by a hard constraint on its mean (accuracy >= 0.75 broken by the variant: mean 0.7000 over all 2 repeats): none of its 1 successful trial is compared, so there is no paired comparison")
    }).pipe(Effect.provide(studyEnv("hand"))))

  it("never \"significant\" on a line whose interval includes 0: when the test and the interval disagree, the line says so and claims no difference", () => {
    const versus = (lower: number, upper: number, b: number, c: number): StudyCompare.VersusBaseline => ({
      paired: {
        difference: { estimate: (lower + upper) / 2, lower, upper, level: 0.95, method: "test", resamples: 2000, seed: 1 },
        cases: 40,
        candidateWins: c,
        baselineWins: b,
        ties: 40 - b - c
      },
      mcnemar: { b, c, pValue: S.mcnemarExact(b, c).pValue, method: "test" },
      adjustedPValue: null,
      sufficiency: { sufficient: true, reason: null },
      claim: "case"
    })
    // the test says significant (2 vs 12: p = 0.01294), the interval includes 0
    const disagree = StudyCompare.versusText(versus(-0.025, 0.225, 2, 12), 0.95)
    assert.notMatch(disagree, /(?<!not )significant/)
    assert.include(disagree, "the 95% interval includes 0")
    assert.include(disagree, "exact McNemar p = 0.01294 (candidate better in 12 vs baseline in 2 discordant cases) < 0.05")
    assert.include(disagree, "the interval and the test disagree: no difference claimed")
    // the interval excludes 0, the test does not reject (2 vs 6: p = 0.2891): no claim either
    const other = StudyCompare.versusText(versus(0.025, 0.225, 2, 6), 0.95)
    assert.include(other, "exact McNemar p = 0.2891 (candidate better in 6 vs baseline in 2 discordant cases) >= 0.05")
    assert.include(other, "the interval and the test disagree: no difference claimed")
    assert.include(disagree, "the exact test counts the discordant cases only")
    // the interval excludes 0 and the test rejects, but not once Holm-adjusted for the report's
    // other tests: the line says that the adjustment is why
    const holm = StudyCompare.versusText({ ...versus(0.05, 0.3, 2, 12), adjustedPValue: 0.05176 }, 0.95)
    assert.include(holm, "exact McNemar p = 0.01294 (Holm-adjusted 0.05176) (candidate better in 12 vs baseline in 2 discordant cases) >= 0.05")
    assert.include(holm, "the interval and the test disagree: no difference claimed (the interval is this comparison's alone; the test's p-value is adjusted for all the report's exact tests (Holm)")
    assert.notMatch(holm, /(?<!not )significant/)
    // both agree: the usual wording
    assert.include(StudyCompare.versusText(versus(0.05, 0.3, 2, 12), 0.95), "the 95% interval excludes 0; exact McNemar p = 0.01294 (candidate better in 12 vs baseline in 2 discordant cases), significant at 95%")
    assert.include(StudyCompare.versusText(versus(-0.025, 0.225, 2, 6), 0.95), "the 95% interval includes 0: no difference shown; exact McNemar p = 0.2891 (candidate better in 6 vs baseline in 2 discordant cases), not significant at 95%")
  })
})

describe("StudyCompare: no over-claiming on small samples or many variants (issue 16 review)", () => {
  const score: DomainStudy.MetricDecl = { name: "score", reducer: "mean", from: { output: "score" }, direction: "maximize" }
  const scoreP50: DomainStudy.MetricDecl = { name: "scoreP50", reducer: "p50", from: { output: "score" }, direction: "maximize" }

  it.effect("below the minimums (3 cases, 1 repeat): nobody is dominated beyond noise and the conclusion is the current highest-scoring candidate, never best", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "tiny", correct: [new Set([0]), new Set([0, 1, 2])], cases: 3, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants.map((v) => [v.variantId, v.pareto.strict, v.pareto.uncertain]), [["v01", false, true], ["v02", true, true]])
      assert.strictEqual(c.conclusion.wording, "current highest-scoring candidate")
      // the candidate is the top of the ranking; the sample rules out neither (tester16 F5)
      assert.deepStrictEqual(c.conclusion.candidates, ["v02"])
      assert.deepStrictEqual(c.conclusion.notRuledOut, ["v01", "v02"])
      assert.include(c.conclusion.summary, "v02 is the current highest-scoring candidate")
      assert.isTrue(c.conclusion.limitations.some((l) => l.startsWith("insufficient sample for 1 of 1 variant pair (v01–v02: 3 paired cases (< 30) on accuracy)")))
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        assert.notInclude(text, "best for the declared")
        assert.notInclude(text, "dominated")
      }
    }).pipe(Effect.provide(studyEnv("tiny"))))

  it.effect("labels agree in number with the ids after them: one trial is \"trial\", tied variants are \"candidates\", counts say \"1 trial\" / \"2 trials\" (issue 16 trial)", () =>
    Effect.gen(function*() {
      // two identical variants, 1 repeat each: a tie on point estimates, one trial per variant
      const { input, study } = handMade({ id: "tie", correct: [new Set([0, 1]), new Set([0, 1])], cases: 3, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.include(c.conclusion.summary, "v01, v02 tie as the current highest-scoring candidates on point estimates")
      assert.include(c.conclusion.summary, "(not ruled out: v01, v02)")
      assert.deepStrictEqual(c.conclusion.candidates, ["v01", "v02"])
      const text = StudyCompare.renderText(c)
      assert.include(text, "v01: trial p1-v01-r1\n")
      assert.notInclude(text, "trials p1-v01-r1")
      assert.include(text, "1 compared trial;")
      assert.notInclude(text, "(s)")
      const md = StudyCompare.renderMarkdown(c)
      assert.include(md, "v02: trial p1-v02-r1\n")
      assert.notInclude(md, "(s)")
    }).pipe(Effect.provide(studyEnv("tie"))))

  it.effect("identical variants get the same Pareto status, the baseline's included: a group beaten on every case it differs on is dominated, not uncertain (issue 16 trial)", () =>
    Effect.gen(function*() {
      // 9 variants in two groups of identical data (odd arms: 14 of 40 cases right; even arms:
      // the same 14 and 12 more). The marginal intervals widened for 36 comparisons overlap
      // (0.35 + 0.24 > 0.65 − 0.24); the paired difference (+1 on 12 cases, 0 elsewhere) does not
      const weak = new Set(range(0, 14))
      const strong = new Set(range(0, 26))
      const { input, study } = handMade({ id: "groups", correct: Array.from({ length: 9 }, (_, i) => i % 2 === 0 ? weak : strong), cases: 40, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const status = (v: StudyCompare.VariantComparison) => [v.pareto.strict, v.pareto.uncertain, v.pareto.dominatedBy.uncertain]
      const weakIds = ["v01", "v03", "v05", "v07", "v09"]
      const strongIds = ["v02", "v04", "v06", "v08"]
      for (const v of c.variants) {
        assert.deepStrictEqual(status(v), weakIds.includes(v.variantId) ? [false, false, strongIds] : [true, true, []], v.variantId)
      }
      assert.strictEqual(c.conclusion.wording, "best for the declared objectives and constraints")
      assert.deepStrictEqual(c.conclusion.candidates, strongIds)
    }).pipe(Effect.provide(studyEnv("groups"))))

  it.effect("20 identical variants, 3 cases, 1 repeat: every one stays a candidate", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "tiny20", correct: Array.from({ length: 20 }, () => new Set<number>()), cases: 3, repeats: 1, noisy: true, metrics: [accuracy, score], objectives: [{ metric: "score", direction: "maximize" }] })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.strictEqual(c.variants.filter((v) => v.pareto.uncertain).length, 20)
      assert.strictEqual(c.conclusion.wording, "current highest-scoring candidate")
    }).pipe(Effect.provide(studyEnv("tiny20"))))

  it.effect("20 identical variants at the minimums (30 cases × 3 repeats): a p50 objective's interval resamples cases, and no variant is dropped (mean or p50)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "same20",
        correct: Array.from({ length: 20 }, () => new Set<number>()),
        cases: 30,
        repeats: 3,
        noisy: true,
        metrics: [accuracy, score, scoreP50],
        objectives: [{ metric: "scoreP50", direction: "maximize" }]
      })
      yield* Study.run(study)
      const p50 = yield* StudyCompare.compare(input)
      const v = p50.variants[3]!.values.scoreP50!
      assert.include(v.interval!.method, "percentile bootstrap over cases (the trial's p50 recomputed per repeat")
      // the estimate is the mean of the repeats' p50s; the interval is not the range of 3 values
      assert.closeTo(v.interval!.estimate, v.mean!, 1e-12)
      assert.strictEqual(p50.variants.filter((x) => x.pareto.uncertain).length, 20)
      assert.strictEqual(p50.conclusion.wording, "best for the declared objectives and constraints")
      assert.isTrue(p50.conclusion.limitations.some((l) => l.startsWith("multiple comparisons: 20 variants, 190 pairwise comparisons")))
      const mean = yield* StudyCompare.compare({ ...input, objectives: [{ metric: "score", direction: "maximize" }] })
      assert.strictEqual(mean.variants.filter((x) => x.pareto.uncertain).length, 20)
      // a purely trial-level metric (calls, tokensIn, ...) gets Student's t over its repeats
      assert.include(mean.variants[0]!.values.tokensIn!.interval!.method, "Student's t interval over 3 repeat values (df 2)")
    }).pipe(Effect.provide(studyEnv("same20"))))

  const orderRun = (reverse: boolean) =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "order",
        correct: [new Set(range(0, 20)), new Set(range(5, 30))],
        cases: 40,
        repeats: 2,
        noisy: true,
        reverse,
        metrics: [accuracy, score, scoreP50],
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "scoreP50", direction: "maximize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      return JSON.stringify(c.variants.map((v) => [v.values, v.vsBaseline]))
    }).pipe(Effect.provide(studyEnv("order")))

  it.effect("the same data and seed give the same intervals whatever order the store holds the cases in", () =>
    Effect.gen(function*() {
      // (a regression guard: the memory store returns cases in one fixed order, so this passes
      // before the fix too; the golden's wrongRate interval moved when the order became the key's)
      const forward = yield* orderRun(false)
      const backward = yield* orderRun(true)
      assert.strictEqual(backward, forward)
    }))
})

describe("StudyCompare: unusual but legal studies read right (issue 16, study16d)", () => {
  it.effect("variants that tie exactly share weighted rank 1 (the order among them says nothing)", () =>
    Effect.gen(function*() {
      const same = new Set(range(0, 25))
      const { input, study } = handMade({ id: "ties", correct: [same, same, same], cases: 30, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants.map((v) => v.rank), [1, 1, 1])
      const text = StudyCompare.renderText(c)
      assert.notInclude(text, "weighted rank 2")
      assert.notInclude(text, "weighted rank 3")
    }).pipe(Effect.provide(studyEnv("ties"))))

  it.effect("one variant: the section against the baseline says there is nothing to compare, in text and Markdown", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "alone", correct: [new Set(range(0, 20))], cases: 30, repeats: 1 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        const after = text.slice(text.search(/against the baseline/i))
        assert.match(after.split("\n")[1]!, /nothing to compare: no other variant has a compared trial/)
      }
    }).pipe(Effect.provide(studyEnv("alone"))))

  it.effect("no objectives: no variant is placed on a Pareto front, and none reads \"dominated by\" an empty list (tester18c F7)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "plain", correct: [new Set(range(0, 20)), new Set(range(0, 25))], cases: 30, objectives: [] })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c)]) {
        assert.notInclude(text, "dominated by")
        assert.include(text, "none (no objectives to place it by)")
      }
      // the Study page says the same in both Pareto columns, never a bare "no" (fix18v's note)
      const page = renderStudyPage(c)
      assert.notInclude(page, "dominated by")
      for (const id of ["v01", "v02"]) {
        assert.include(paretoCells(page, id), `<td class="pareto-strict">none (no objectives to place it by)</td><td class="pareto-uncertain">none (no objectives to place it by)</td>`, id)
      }
    }).pipe(Effect.provide(studyEnv("plain"))))

  it.effect("one variant, with and without objectives: the Study page's Pareto cells say what the text says", () =>
    Effect.gen(function*() {
      for (const objectives of [undefined, []]) {
        const id = objectives === undefined ? "solo" : "soloplain"
        const { input, study } = handMade({ id, correct: [new Set(range(0, 20))], cases: 30, repeats: 1, ...(objectives === undefined ? {} : { objectives }) })
        const c = yield* Study.run(study).pipe(Effect.zipRight(StudyCompare.compare(input)), Effect.provide(studyEnv(id)))
        const text = StudyCompare.renderText(c)
        const cells = paretoCells(renderStudyPage(c), "v01")
        assert.notInclude(cells, "dominated by")
        if (objectives === undefined) {
          assert.include(text, "Pareto: front;")
          assert.include(cells, `<td class="pareto-strict">yes</td><td class="pareto-uncertain">yes</td>`)
        } else {
          assert.include(text, "Pareto: none (no objectives to place it by)")
          assert.include(cells, `<td class="pareto-strict">none (no objectives to place it by)</td>`)
        }
      }
    }))

  it.effect("a metric no compared repeat has a value for reads as missing, never \"across 0 repeats\"; an unpriced costUsd says there is no known cost", () =>
    Effect.gen(function*() {
      const ghost: DomainStudy.MetricDecl = { name: "ghost", reducer: "mean", from: { output: "missing" }, direction: "maximize" }
      const { input, study } = handMade({
        id: "missing",
        correct: [new Set(range(0, 20)), new Set(range(0, 25))],
        cases: 30,
        repeats: 2,
        flaky: true,
        metrics: [accuracy, ghost]
      })
      // the flaky tasks report tokens to a lease without a price, after a retry the TestClock runs
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 200; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* fiber.await.pipe(Effect.flatten)).status, "completed")
      const c = yield* StudyCompare.compare(input)
      const v = c.variants[0]!
      // the trials' calls have tokens and no price: no repeat has a cost
      assert.deepStrictEqual(v.values.costUsd!.perRepeat, [null, null])
      assert.match(v.values.costUsd!.aggregation, /; no known cost: costUsd not available \(\d+ calls had tokens but no price in each of its 2 trials; cost unknown, not \$0\)$/)
      assert.include(v.values.ghost!.aggregation, "; not available: no value in any of its 2 compared repeats")
      for (const text of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c), JSON.stringify(c)]) assert.notInclude(text, "across 0 repeats")
    }).pipe(Effect.provide(studyEnv("missing"))))

  it.effect("an objective metric no trial has: no variant is called dominated, no weighted-ranking caveat without a ranking", () =>
    Effect.gen(function*() {
      const ghost: DomainStudy.MetricDecl = { name: "ghost", reducer: "mean", from: { output: "missing" }, direction: "maximize" }
      const { input, study } = handMade({
        id: "ghost",
        correct: [new Set(range(0, 20)), new Set(range(0, 25))],
        cases: 30,
        repeats: 1,
        metrics: [accuracy, ghost],
        objectives: [{ metric: "ghost", direction: "maximize" }, { metric: "accuracy", direction: "maximize" }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.conclusion.candidates, [])
      const text = StudyCompare.renderText(c)
      assert.notInclude(text, "Pareto: dominated")
      assert.include(text, "Pareto: not placed (no value for ghost)")
      assert.notInclude(text, "the weighted ranking depends on")
      assert.include(text, "objective ghost has no value for variants v01, v02")
    }).pipe(Effect.provide(studyEnv("ghost"))))
})

describe("StudyCompare: worst and best cases by the objective's goal (issue 16, tester16c F1)", () => {
  it.effect("a target objective: the cases are ranked by their distance to the target, and a tie is on that distance, never on a value", () =>
    Effect.gen(function*() {
      // 0/1 cases around a target of 0.5: every case is 0.5 away, whatever its value; a tie
      const { input, study } = handMade({
        id: "tgt-tie",
        correct: [BASE, CAND],
        cases: 40,
        metrics: [{ ...accuracy, direction: "target" }],
        objectives: [{ metric: "accuracy", direction: "target", target: 0.5 }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const base = c.variants[0]!.evidence.accuracy!
      assert.deepStrictEqual(base.tie, { value: null, cases: 40, target: 0.5, distance: 0.5 })
      assert.deepStrictEqual([base.worstCases, base.bestCases], [[], []])
      const text = StudyCompare.renderText(c)
      assert.include(text, "accuracy: all 40 cases are 0.5000 from the target 0.5000 (values 0 and 1): a tie, no worst or best cases")
      assert.notInclude(text, "have the value 0")
      const e = yield* StudyCompare.evidence(input, "accuracy", "v02", { seed: 7 })
      assert.include(StudyCompare.renderEvidence(e), "worst and best cases: all 40 cases are 0.5000 from the target 0.5000 (values 0 and 1)")
      assert.include(renderStudyPage(c), "all 40 cases are 0.5000 from the target 0.5000 (values 0 and 1): a tie")
    }).pipe(Effect.provide(studyEnv("tgt-tie"))))

  it.effect("a target of 0.75: the worst cases are the ones furthest from it (value 0), the best the nearest (value 1), with their distance", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "tgt-rank",
        correct: [BASE, CAND],
        cases: 40,
        metrics: [{ ...accuracy, direction: "target" }],
        objectives: [{ metric: "accuracy", direction: "target", target: 0.75 }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const ev = c.variants[0]!.evidence.accuracy!
      assert.isUndefined(ev.tie)
      // BASE is right on 0..27: its wrong cases 28..39 (value 0, 0.75 away) are the worst
      assert.deepStrictEqual(ev.worstCases.map((w) => [w.value, w.distance]), Array.from({ length: 5 }, () => [0, 0.75]))
      assert.deepStrictEqual(ev.bestCases.map((w) => [w.value, w.distance]), Array.from({ length: 5 }, () => [1, 0.25]))
      assert.match(StudyCompare.renderText(c), /accuracy worst: \S+ 0 \(0\.7500 from the target\); /)
      const e = yield* StudyCompare.evidence(input, "accuracy", "v01", { seed: 7, worst: 2, best: 2 })
      assert.deepStrictEqual(e.worstCases.map((w) => w.value), [0, 0])
      assert.deepStrictEqual(e.bestCases.map((w) => w.value), [1, 1])
      assert.include(StudyCompare.renderEvidence(e), " 0 (0.7500 from the target) · ")
      assert.include(renderStudyPage(c), "0 (0.7500 from the target)")
    }).pipe(Effect.provide(studyEnv("tgt-rank"))))

  for (const [direction, worstValue] of [["maximize", 0], ["minimize", 1]] as const) {
    it.effect(`${direction} on mixed values: the worst cases are the ${direction === "maximize" ? "lowest" : "highest"}`, () =>
      Effect.gen(function*() {
        const { input, study } = handMade({
          id: `dir-${direction}`,
          correct: [BASE],
          cases: 40,
          metrics: [{ ...accuracy, direction }],
          objectives: [{ metric: "accuracy", direction }]
        })
        yield* Study.run(study)
        const e = yield* StudyCompare.evidence(input, "accuracy", "v01", { worst: 3, best: 3 })
        assert.isUndefined(e.tie)
        assert.deepStrictEqual(e.worstCases.map((w) => w.value), [worstValue, worstValue, worstValue])
        assert.deepStrictEqual(e.bestCases.map((w) => w.value), [1 - worstValue, 1 - worstValue, 1 - worstValue])
        assert.isUndefined(e.worstCases[0]!.distance)
      }).pipe(Effect.provide(studyEnv(`dir-${direction}`))))
  }
})

describe("StudyCompare: the report's conclusion says what study run said (issue 16, tester16c F3, F4)", () => {
  it.effect("each variant with no succeeded trial is a limitation of the report too, in the words of study run (one source)", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "broken", "broken"], repeats: 2 })
      const report = yield* Study.run(study)
      assert.strictEqual(report.limitations.length, 2)
      const c = yield* StudyCompare.compare({
        ...study,
        baseline: { id: "v01" },
        variants: [{ id: "v01", assignment: {} }, { id: "v02", assignment: {} }, { id: "v03", assignment: {} }]
      })
      for (const l of report.limitations) assert.include(c.conclusion.limitations, l)
      assert.include(c.conclusion.limitations, "variant v03 (quality=broken, index=2) has no succeeded trial (2 failed): no result for it can be compared")
      assert.include(StudyCompare.renderText(c), "    variant v02 (quality=broken, index=1) has no succeeded trial (2 failed)")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("one variant left after the hard constraints: \"the only variant meeting the constraints\", never \"best\"; an exclusion within the excluded variant's interval is said", () =>
    Effect.gen(function*() {
      // accuracy >= 0.7 over 30 cases × 2 repeats: v01 0.667 (its interval includes 0.7), v02 0.4
      // (its interval does not), v03 0.933 (the only one left)
      const { input, study } = handMade({
        id: "onlyone",
        correct: [new Set(range(0, 20)), new Set(range(0, 12)), new Set(range(0, 28))],
        cases: 30,
        repeats: 2,
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.7 } }]
      })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      assert.strictEqual(c.conclusion.wording, StudyCompare.WORDING.only)
      assert.deepStrictEqual(c.conclusion.candidates, ["v03"])
      assert.include(c.conclusion.summary, "v03 is the only variant meeting the constraints: every other variant broke a hard constraint or has no succeeded trial, so nothing was compared")
      assert.match(c.conclusion.summary, /v01 excluded: accuracy 0\.6667 < 0\.7000, but its 95% interval \[0\.\d+, 0\.\d+\] includes 0\.7000/)
      assert.notInclude(c.conclusion.summary, "v02 excluded")
      assert.isTrue(c.conclusion.limitations.some((l) => l.startsWith("v01 excluded: accuracy 0.6667 < 0.7000") && l.endsWith("its exclusion is not beyond noise")))
      const text = StudyCompare.renderText(c)
      assert.notInclude(text.slice(text.indexOf("CONCLUSION")), "best for the declared objectives")
      assert.include(text, "candidate (the only variant meeting the constraints): v03")
    }).pipe(Effect.provide(studyEnv("onlyone"))))
})

describe("StudyCompare: a zero-width interval over equal cases is marked (tester16c F10)", () => {
  it.effect("12 cases all right: [1, 1] with the mark and n, in the text, the evidence and the Study page; a spread interval has none", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "degenerate", correct: [new Set(range(0, 12)), new Set(range(0, 9))], cases: 12, repeats: 2 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input)
      const note = "[1, 1] (every case equal: the bootstrap cannot show uncertainty; n = 12)"
      assert.include(c.variants[0]!.values.accuracy!.interval!.method, "every case equal: the bootstrap cannot show uncertainty; n = 12")
      assert.include(StudyCompare.renderText(c), note)
      assert.include(StudyCompare.renderMarkdown(c), note)
      assert.include(renderStudyPage(c), note)
      assert.include(StudyCompare.renderEvidence(yield* StudyCompare.evidence(input, "accuracy", "v01")), `value: 1 ${note}`)
      assert.strictEqual(StudyCompare.degenerateNote(c.variants[1]!.values.accuracy!.interval), "")
      assert.notInclude(c.variants[1]!.values.accuracy!.interval!.method, "every case equal")
    }).pipe(Effect.provide(studyEnv("degenerate"))))
})

describe("StudyCompare: repeats a variant never had are not listed (tester16c F8)", () => {
  it.effect("v02 has 5 repeats (a confirmation), v01 3: v01's perRepeat has 3 values, no \"—\" for repeats 4 and 5", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "ownrepeats", correct: [new Set(range(0, 25)), new Set(range(0, 27))], cases: 30, repeats: 5 })
      const keep = (trialId: string) => trialId.includes("-v02-") || /-r[123]$/.test(trialId)
      const only: Study.StudyInput = {
        ...study,
        trialsFor: (v) => study.trialsFor(v).filter((t) => keep(t.trialId)),
        suiteFor: (v) => {
          const s = study.suiteFor(v) as Suite.Suite<any, any, any>
          return { ...s, experiments: s.experiments.filter((e) => keep(e.id)) }
        }
      }
      yield* Study.run(only)
      const c = yield* StudyCompare.compare(input)
      assert.deepStrictEqual(c.variants[0]!.values.accuracy!.perRepeat.length, 3)
      assert.deepStrictEqual(c.variants[1]!.values.accuracy!.perRepeat.length, 5)
      const md = StudyCompare.renderMarkdown(c)
      assert.notMatch(md, /repeats [^\n]*, —, —/)
    }).pipe(Effect.provide(studyEnv("ownrepeats"))))
})

describe("StudyCompare: Student's t over equal repeats (tester16d F3)", () => {
  it.effect("a zero-width t interval is marked and claims no difference; the front pairs the tokens case by case (tester16e F1)", () =>
    Effect.gen(function*() {
      // the same answers; every call of v02 reports 120 tokens, v01's 100: each repeat's tokens
      // are the same figure, so Student's t over them (and over the paired differences) is [x, x]
      const { input, study } = handMade({
        id: "flat-t",
        correct: [BASE, BASE],
        cases: 40,
        repeats: 3,
        flaky: true,
        tokensOf: (arm) => arm === 0 ? 100 : 120,
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "tokens", direction: "minimize" }]
      })
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      yield* fiber.await.pipe(Effect.flatten)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const [v01, v02] = c.variants
      assert.deepStrictEqual(v02!.values.tokens!.perRepeat, [4800, 4800, 4800])
      assert.include(v02!.values.tokens!.interval!.method, "every repeat equal: Student's t cannot show uncertainty; n = 3")
      const vs = v02!.vsBaseline.tokens!
      assert.include(vs.paired!.difference.method, "every paired difference equal: Student's t cannot show uncertainty; n = 3")
      const text = StudyCompare.renderText(c)
      assert.include(text, "tokens: 4800 [4800, 4800] (every repeat equal: Student's t cannot show uncertainty; n = 3)")
      const line = text.split("\n").find((l) => l.includes("v02 tokens: Δ")) ?? ""
      assert.include(line, "the 95% interval has no width: no difference shown", text)
      assert.notInclude(line, "excludes 0")
      // v02 uses 20 tokens more on every one of the 40 cases, at the same accuracy: the front
      // pairs the pipelines' tokens case by case, and that difference is beyond noise (the equal
      // repeats make it more certain, never less: tester16e F1)
      assert.deepStrictEqual([v01!.pareto.strict, v02!.pareto.strict], [true, false])
      assert.deepStrictEqual([v01!.pareto.uncertain, v02!.pareto.uncertain], [true, false])
      assert.deepStrictEqual(v02!.pareto.dominatedBy.uncertain, ["v01"])
      assert.deepStrictEqual(c.conclusion.candidates, ["v01"])
    }).pipe(Effect.provide(studyEnv("flat-t"))))
})

describe("StudyCompare: an exclusion on a zero-width interval is the value breaking the bound (fix16x, fix16aa)", () => {
  it.effect("a hard constraint broken by equal repeats: the excluded variant is named, its t interval marked, its value said to break the bound, never \"not beyond noise\"", () =>
    Effect.gen(function*() {
      // v02's every call reports 120 tokens (4800 per repeat, 3 repeats), v01's 100: tokens <= 4500
      // excludes v02 on [4800, 4800], a t interval over equal repeats (no width: no spread at all)
      const { input, study } = handMade({
        id: "flat-x",
        correct: [BASE, BASE],
        cases: 40,
        repeats: 3,
        flaky: true,
        tokensOf: (arm) => arm === 0 ? 100 : 120,
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "tokens", direction: "minimize", hardConstraint: { op: "<=", value: 4500 } }]
      })
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      yield* fiber.await.pipe(Effect.flatten)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      assert.deepStrictEqual(c.conclusion.candidates, ["v01"])
      const named =
        "v02 excluded: its tokens 4800 breaks tokens <= 4500 (its 95% interval [4800, 4800] (every repeat equal: Student's t cannot show uncertainty; n = 3) has zero width: the value is what it is)"
      assert.include(c.conclusion.summary, named)
      assert.include(c.conclusion.limitations, named)
      // JSON: the variant's exclusion, marked zero-width
      assert.deepStrictEqual(c.variants[1]!.exclusions, [{ metric: "tokens", zeroWidth: true, text: named }])
      // text and Markdown reports: the sentence, never the noise wording for it
      for (const out of [StudyCompare.renderText(c), StudyCompare.renderMarkdown(c), JSON.stringify(c)]) {
        assert.include(out, "v02 excluded: its tokens 4800 breaks tokens <= 4500")
        assert.notInclude(out, "not beyond noise")
        assert.notInclude(out, "within noise (")
      }
      // evidence (text and JSON) and the Study page's evidence block
      const ev = yield* StudyCompare.evidence(input, "tokens", "v02", { seed: 7 })
      assert.strictEqual(ev.notCompared?.exclusion, named)
      assert.include(StudyCompare.renderEvidence(ev), named)
      const page = renderStudyPage(c, { pipelineTrial: new Map(), notCompared: new Map([["v02", new Map([["tokens", ev]])]]) })
      assert.include(page, `<p class="exclusion">v02 excluded: its tokens 4800 breaks tokens &lt;= 4500`)
      assert.notInclude(page, "not beyond noise")
    }).pipe(Effect.provide(studyEnv("flat-x"))))
})

describe("StudyCompare: worst cases are worse than the best value (tester16d F7)", () => {
  it.effect("two wrong cases of 40: the worst list holds those two, never a right case; the best list never a wrong one", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({ id: "few-wrong", correct: [BASE, CAND], cases: 40 })
      yield* Study.run(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const ev = c.variants[1]!.evidence.accuracy!
      // CAND is wrong on 26 and 27 only
      assert.deepStrictEqual(ev.worstCases.map((w) => w.value), [0, 0])
      assert.deepStrictEqual(ev.bestCases.map((w) => w.value), [1, 1, 1, 1, 1])
      const text = StudyCompare.renderText(c)
      assert.match(text, /\n    accuracy worst: \S+ 0; \S+ 0\n/, text)
      const e = yield* StudyCompare.evidence(input, "accuracy", "v02", { seed: 7, worst: 5, best: 5 })
      assert.deepStrictEqual(e.worstCases.map((w) => w.value), [0, 0])
    }).pipe(Effect.provide(studyEnv("few-wrong"))))
})

describe("StudyCompare: certain costs separate variants on the uncertainty-aware front (tester16e F1)", () => {
  /** Runs a hand-made study to its end on the TestClock. */
  const runIt = (study: Study.StudyInput) =>
    Effect.gen(function*() {
      const fiber = yield* Effect.fork(Study.run(study))
      for (let i = 0; i < 50; i++) yield* Effect.yieldNow().pipe(Effect.zipRight(Effect.sleep("0 millis")))
      yield* TestClock.adjust("1 second")
      yield* fiber.await.pipe(Effect.flatten)
    })

  it.effect("a variant dearer on every case at equal accuracy, its repeats all costing the same, is dominated; the baseline line still claims no difference", () =>
    Effect.gen(function*() {
      // the same answers; every call of v02 costs 6 times v01's on the same case (the cost
      // varies from case to case), and every repeat of a variant costs the same in total
      const { input, study } = handMade({
        id: "dear",
        correct: [BASE, BASE, BASE],
        cases: 40,
        repeats: 3,
        flaky: true,
        costOf: (arm, n) => (arm === 1 ? 0.006 : 0.001) * (1 + (n % 5)) + (arm === 2 ? (n % 2 === 0 ? 0.001 : -0.001) : 0),
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "costUsd", direction: "minimize" }]
      })
      yield* runIt(study)
      const c = yield* StudyCompare.compare(input, { seed: 7 })
      const [v01, v02, v03] = c.variants
      assert.strictEqual(v01!.values.accuracy!.mean, v02!.values.accuracy!.mean)
      // every repeat's cost is the same: Student's t over them has no width
      const per = v02!.values.costUsd!.perRepeat
      assert.strictEqual(per.length, 3)
      assert.isTrue(per.every((x) => x !== null && S.nearlyEqual(x, per[0]!)))
      assert.include(v02!.values.costUsd!.interval!.method, "Student's t cannot show uncertainty")
      // v02 is dearer than v01 on every case: dominated beyond noise, by v01 and v03
      assert.isFalse(v02!.pareto.uncertain)
      assert.includeMembers([...v02!.pareto.dominatedBy.uncertain], ["v01"])
      // v03 costs v01's ± 0.001 by case (the same total): neither beats the other beyond noise
      assert.isTrue(v01!.pareto.uncertain)
      assert.isTrue(v03!.pareto.uncertain)
      assert.notInclude(c.conclusion.candidates, "v02")
      assert.notInclude(c.conclusion.summary, "are v01, v02")
      // the claim against the baseline keeps its significance wording (no width: no difference shown)
      const line = StudyCompare.renderText(c).split("\n").find((l) => l.includes("v02 costUsd: Δ")) ?? ""
      assert.include(line, "no width: no difference shown")
    }).pipe(Effect.provide(studyEnv("dear"))))

  it.effect("study evidence of a cost: each case's cost (its pipelines' share), beside the baseline's cost of the same case (fix16ac F2)", () =>
    Effect.gen(function*() {
      const { input, study } = handMade({
        id: "percase",
        correct: [BASE, BASE],
        cases: 40,
        repeats: 3,
        flaky: true,
        costOf: (arm, n) => (arm === 1 ? 0.006 : 0.001) * (1 + (n % 5)),
        // costUsd is no objective: the evidence reads its per-pipeline shares all the same
        objectives: [{ metric: "accuracy", direction: "maximize" }]
      })
      yield* runIt(study)
      const e = yield* StudyCompare.evidence(input, "costUsd", "v02", { seed: 7, worst: 2, best: 1 })
      assert.strictEqual(e.perCase, "pipeline shares")
      assert.strictEqual(e.worstCases.length, 2)
      const w = e.worstCases[0]!
      assert.closeTo(w.value, 0.03, 1e-12)
      assert.strictEqual(w.baseline!.variantId, "v01")
      assert.closeTo(w.baseline!.value, 0.005, 1e-12)
      assert.closeTo(w.baseline!.difference, 0.025, 1e-12)
      assert.strictEqual(w.baseline!.pipelineIds.length, 3)
      assert.notDeepEqual(w.baseline!.pipelineIds, w.pipelineIds)
      assert.closeTo(e.bestCases[0]!.value, 0.006, 1e-12)
      const text = StudyCompare.renderEvidence(e)
      assert.include(text, "per case: each case's share of costUsd (its pipelines' attempts summed; the mean over the repeats)")
      assert.match(text, /\n {4}baseline v01: 0\.005000 \(Δ \+0\.02500\) · /)
      // a case-level metric pairs the same way; the baseline's own evidence has nothing beside it
      const acc = yield* StudyCompare.evidence(input, "accuracy", "v02", { seed: 7 })
      assert.isTrue(acc.tie !== undefined || acc.worstCases.every((x) => x.baseline !== undefined))
      const own = yield* StudyCompare.evidence(input, "costUsd", "v01", { seed: 7 })
      assert.isTrue(own.worstCases.length > 0 && own.worstCases.every((x) => x.baseline === undefined))
    }).pipe(Effect.provide(studyEnv("percase"))))

  it.effect("a trial-only value whose repeats differ by the same amount each time is an exact difference: dominated", () =>
    Effect.gen(function*() {
      const same = new Set(range(0, 30))
      const objectives = [{ metric: "accuracy", direction: "maximize" as const }, { metric: "wallMs", direction: "minimize" as const }]
      // three repeats: v02 takes 50 ms more than v01 in every repeat (wallMs has no per-case value)
      const three = handMade({ id: "exact", correct: [same, same], cases: 30, repeats: 3, objectives })
      yield* Study.run(three.study)
      const ledger = (yield* StudyCatalog).ledger("exact")
      for (const r of [1, 2, 3]) {
        yield* ledger.addUsage(`p1-v01-r${r}`, { calls: 0, tokens: 0, costUsd: 0, timeMs: 100 * r }, 1)
        yield* ledger.addUsage(`p1-v02-r${r}`, { calls: 0, tokens: 0, costUsd: 0, timeMs: 100 * r + 50 }, 1)
      }
      const c = yield* StudyCompare.compare(three.input, { seed: 7 })
      const vs = c.variants[1]!.vsBaseline.wallMs!
      assert.include(vs.paired!.difference.method, "every paired difference equal: Student's t cannot show uncertainty; n = 3")
      assert.deepStrictEqual([c.variants[0]!.pareto.uncertain, c.variants[1]!.pareto.uncertain], [true, false])
      assert.deepStrictEqual(c.variants[1]!.pareto.dominatedBy.uncertain, ["v01"])
    }).pipe(Effect.provide(studyEnv("exact"))))

  it.effect("a trial-only value with one repeat has no interval: never beyond noise, whatever the minimum", () =>
    Effect.gen(function*() {
      const same = new Set(range(0, 30))
      const objectives = [{ metric: "accuracy", direction: "maximize" as const }, { metric: "wallMs", direction: "minimize" as const }]
      // one repeat (the minimum lowered to 1): no interval at all, so no claim beyond noise
      const one = handMade({ id: "exact1", correct: [same, same], cases: 30, repeats: 1, objectives, analysis: { minRepeats: 1 } })
      yield* Study.run(one.study)
      const ledger1 = (yield* StudyCatalog).ledger("exact1")
      yield* ledger1.addUsage("p1-v01-r1", { calls: 0, tokens: 0, costUsd: 0, timeMs: 100 }, 1)
      yield* ledger1.addUsage("p1-v02-r1", { calls: 0, tokens: 0, costUsd: 0, timeMs: 150 }, 1)
      const c1 = yield* StudyCompare.compare(one.input, { seed: 7 })
      assert.deepStrictEqual([c1.variants[0]!.pareto.strict, c1.variants[1]!.pareto.strict], [true, false])
      assert.deepStrictEqual([c1.variants[0]!.pareto.uncertain, c1.variants[1]!.pareto.uncertain], [true, true])
    }).pipe(Effect.provide(studyEnv("exact1"))))
})
