/**
 * The study file's `metrics:` and `analysis:` sections (src/config/internal/study.ts,
 * src/domain/Study.ts): validation with field paths and did-you-mean, objectives naming
 * declared or built-in metrics, and the protocol digest, which a study without `metrics`
 * keeps exactly as it was before the section existed.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as YAML from "yaml"
import * as StudyConfig from "../../src/config/Study.js"
import type { ConfigError } from "../../src/domain/Errors.js"
import * as Study from "../../src/domain/Study.js"

const fixtures = fileURLToPath(new URL("../fixtures/studies/", import.meta.url))
const base = YAML.parse(fs.readFileSync(path.join(fixtures, "study.yaml"), "utf8")) as Record<string, unknown>

/** The fixture study with some top-level fields replaced (`undefined` removes one), in a temporary directory. */
const write = (over: Record<string, unknown>): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-study-metrics-"))
  fs.copyFileSync(path.join(fixtures, "experiment.yaml"), path.join(dir, "experiment.yaml"))
  const doc: Record<string, unknown> = { ...base, output: { root: "out" } }
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) delete doc[k]
    else doc[k] = v
  }
  fs.writeFileSync(path.join(dir, "study.yaml"), YAML.stringify(doc))
  return path.join(dir, "study.yaml")
}

const load = (file: string) => StudyConfig.load(file, { env: {}, allowOverCap: true }).pipe(Effect.provide(NodeContext.layer))
const lines = (e: ConfigError) => e.issues.map((i) => `${i.path}: ${i.message}${i.suggestion !== undefined ? ` | ${i.suggestion}` : ""}`)
const problems = (over: Record<string, unknown>) => Effect.map(Effect.flip(load(write(over))), lines)

const accuracy = { name: "accuracy", reducer: "mean", from: { output: "correct" }, unit: "ratio", direction: "maximize" }

describe("the study file's metrics section", () => {
  it.effect("a metricThreshold stop names a declared or built-in metric: a typo is refused at stop[i].metric with did-you-mean", () =>
    Effect.gen(function*() {
      const found = yield* problems({
        metrics: [accuracy],
        stop: [{ when: "allTrialsTerminal" }, { when: "metricThreshold", metric: "acuracy", op: ">=", value: 0.9 }]
      })
      assert.deepStrictEqual(found, [
        "stop[1].metric: unknown metric \"acuracy\": not declared under metrics, not built in and not reported by a judge task (the condition could never fire) | did you mean \"accuracy\"?"
      ])
      // the right name, and a built-in one, load
      const ok = yield* load(write({
        metrics: [accuracy],
        stop: [{ when: "metricThreshold", metric: "accuracy", op: ">=", value: 0.9 }, { when: "metricThreshold", metric: "costUsd", op: ">=", value: 1 }]
      }))
      assert.strictEqual(ok.stop.length, 2)
      // without a metrics section a task may report any name: a warning with did-you-mean
      const loose = yield* load(write({
        metrics: undefined,
        objectives: [{ metric: "accuracy", direction: "maximize" }],
        stop: [{ when: "metricThreshold", metric: "acuracy", op: ">=", value: 0.9 }]
      }))
      assert.isTrue(loose.warnings.some((w) => w.startsWith("warning: stop[0].metric: \"acuracy\"") && w.includes("did you mean \"accuracy\"")))
    }))

  it.effect("a successfulTrials count above the planned trials is a warning (it can never stop the study early)", () =>
    Effect.gen(function*() {
      const over = yield* load(write({ stop: [{ when: "successfulTrials", count: 1000 }] }))
      assert.isTrue(over.warnings.some((w) => w.startsWith(`warning: stop[0].count: 1,000 successful trials are more than the ${over.plan.trials} planned`)))
      const within = yield* load(write({ stop: [{ when: "successfulTrials", count: 2 }] }))
      assert.isFalse(within.warnings.some((w) => w.includes("stop[0].count")))
    }))

  it.effect("declared metrics load with their defaults; analysis defaults apply", () =>
    Effect.gen(function*() {
      const s = yield* load(write({
        metrics: [accuracy, { name: "spamRate", reducer: "rate", from: { output: "label" }, equals: "spam" }, { name: "scoreP95", reducer: "p95", from: { metric: "score" } }],
        analysis: { minPairedCases: 50, seed: 9 }
      }))
      assert.deepStrictEqual(s.metrics.map((m) => [m.name, m.reducer]), [["accuracy", "mean"], ["spamRate", "rate"], ["scoreP95", "p95"]])
      assert.deepStrictEqual(s.analysis, { minPairedCases: 50, minRepeats: 3, level: 0.95, resamples: 10_000, seed: 9 })
      const none = yield* load(write({}))
      assert.deepStrictEqual(none.metrics, [])
      assert.deepStrictEqual(none.analysis, Study.DEFAULT_ANALYSIS)
    }))

  it.effect("bad declarations are errors at their field paths, with a did-you-mean for the reducer", () =>
    Effect.gen(function*() {
      const found = yield* problems({
        metrics: [
          { name: "a", reducer: "maen", from: { output: "x" } },
          { name: "b", reducer: "mean", from: { output: "x" }, equals: 1 },
          { name: "e", reducer: "mean", from: { ouput: "x" } }
        ]
      })
      const at = (p: string) => found.filter((l) => l.startsWith(`${p}:`) || l.startsWith(`${p}.`))
      assert.match(at("metrics[0].reducer").join("\n"), /got "maen" \| did you mean "mean"\?/)
      assert.include(at("metrics[1].equals").join("\n"), "only reducer rate takes equals (reducer is mean)")
      assert.isAbove(at("metrics[2].from").length, 0, found.join("\n"))
      // checked once the file decodes: names
      const names = yield* problems({
        metrics: [
          { name: "calls", reducer: "sum", from: { metric: "n" } },
          { name: "d", reducer: "sum", from: { metric: "n" } },
          { name: "d", reducer: "sum", from: { metric: "n" } }
        ],
        objectives: [{ metric: "d", direction: "maximize" }],
        stop: [{ when: "metricThreshold", metric: "d", op: ">=", value: 1 }]
      })
      assert.deepStrictEqual(names, [
        `metrics[0].name: "calls" is a built-in metric (${Study.BUILTIN_METRIC_NAMES.join(", ")}): objectives name it without declaring it`,
        "metrics[2].name: metric \"d\" is declared twice (first at metrics[1])"
      ])
    }))

  it.effect("with a metrics section, an objective names a declared or built-in metric: else an error at objectives[i].metric", () =>
    Effect.gen(function*() {
      const found = yield* problems({
        metrics: [accuracy],
        objectives: [
          { metric: "acuracy", direction: "maximize" },
          { metric: "costUsd", direction: "minimize" },
          { metric: "latencyP95", direction: "minimize" },
          { metric: "zzz", direction: "minimize" }
        ]
      })
      assert.deepStrictEqual(found.filter((l) => l.startsWith("objectives")), [
        "objectives[0].metric: unknown metric \"acuracy\": not declared under metrics, not built in and not reported by a judge task | did you mean \"accuracy\"?",
        "objectives[2].metric: unknown metric \"latencyP95\": not declared under metrics, not built in and not reported by a judge task | did you mean \"latencyP95Ms\"?",
        `objectives[3].metric: unknown metric "zzz": not declared under metrics, not built in and not reported by a judge task | declare it under metrics (metrics: [{ name: zzz, reducer: mean, from: { output: FIELD } }]) or give a judge task metric: zzz; known: ${
          ["accuracy", ...Study.BUILTIN_METRIC_NAMES].map((n) => JSON.stringify(n)).join(", ")
        }`
      ])
      // without a metrics section, an objective may name a metric the tasks report (issue 15's studies)
      const legacy = yield* load(write({ objectives: [{ metric: "accuracy", direction: "maximize" }] }))
      assert.deepStrictEqual(legacy.objectives.map((o) => o.metric), ["accuracy"])
    }))

  it.effect("a hard constraint's op written the wrong way round (=>) gets a did-you-mean (>=)", () =>
    Effect.gen(function*() {
      const found = yield* problems({ objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: "=>", value: 0.75 } }] })
      assert.isTrue(found.some((l) => l.startsWith("objectives[0].hardConstraint.op") && l.endsWith("| did you mean \">=\"?")), found.join("\n"))
    }))

  it.effect("analysis values out of range are errors at their paths", () =>
    Effect.gen(function*() {
      const found = yield* problems({ analysis: { level: 1.5, resamples: 10, minRepeats: 0, sede: 1 } })
      for (const p of ["analysis.level", "analysis.resamples", "analysis.minRepeats", "analysis.sede"]) {
        assert.isTrue(found.some((l) => l.startsWith(p)), `${p} in ${found.join("\n")}`)
      }
    }))
})

describe("the protocol digest and metrics", () => {
  it.effect("a study without metrics keeps the digest and parts it had before metrics existed", () =>
    Effect.gen(function*() {
      const s = yield* load(path.join(fixtures, "study.yaml"))
      // computed by the loader of main at f4f9b34, before the metrics section existed: still
      // recognised as the same protocol (its legacy digest, from before the experiment's `run`
      // section and pool capacities left the digest, issue 15 item 9)
      assert.isTrue(s.previousProtocols.some((p) => p.digest === "400f066d10a93ca65f784b561d1c4387"))
      assert.isTrue(Study.protocolMatches("400f066d10a93ca65f784b561d1c4387", s))
      // and the current digest, pinned (computed by the loader of main at 728ff34)
      assert.strictEqual(s.protocolDigest, "336c6d5a8c52de697cb9120777aa2152")
      assert.deepStrictEqual(Object.keys(s.protocolParts), ["experiment", "variables", "baseline", "repeats", "budget", "stop", "objectives"])
      assert.isFalse("metrics" in s.protocol)
    }))

  it.effect("declaring metrics changes the digest and names the part; analysis is not part of the protocol", () =>
    Effect.gen(function*() {
      const before = yield* load(write({}))
      const withMetrics = yield* load(write({ metrics: [accuracy] }))
      assert.notStrictEqual(withMetrics.protocolDigest, before.protocolDigest)
      assert.deepStrictEqual(Study.changedParts(before.protocolParts, withMetrics.protocolParts), ["metrics"])
      const otherMetric = yield* load(write({ metrics: [{ ...accuracy, from: { output: "ok" } }] }))
      assert.deepStrictEqual(Study.changedParts(withMetrics.protocolParts, otherMetric.protocolParts), ["metrics"])
      const analysed = yield* load(write({ analysis: { seed: 3, minPairedCases: 10 } }))
      assert.strictEqual(analysed.protocolDigest, before.protocolDigest)
    }))
})
