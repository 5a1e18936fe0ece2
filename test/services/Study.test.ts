import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import Database from "better-sqlite3"
import * as SuiteStore from "../../src/layers/SuiteStore.js"
import * as StudyTables from "../../src/layers/internal/study/tables.js"
import * as Study from "../../src/services/Study.js"
import { stopOfRequest } from "../../src/services/StudyCatalog.js"
import * as Suite from "../../src/services/Suite.js"
import { FatalError } from "../../src/domain/Errors.js"
import * as Pipeline from "../../src/domain/Pipeline.js"
import * as Task from "../../src/domain/Task.js"
import {
  type FreezeInput,
  type StopFired,
  StudyCatalog,
  type StudyCatalogService,
  layerMemory
} from "../../src/services/StudyCatalog.js"
import { makeStudy, studyEnv } from "./studyFixture.js"
import { toVersion16 } from "../support/handoffEvents.js"

/**
 * `study` with a two-task pipeline per trial: `report` reports the pipeline-scope metric
 * `score` = n, then `finish` fails (fatally) on odd n; `pipelinesPerTrial` = `cases`.
 */
const withScores = (study: Study.StudyInput, cases: number): Study.StudyInput => {
  const report = Task.make("report", (n: number, ctx) => Effect.as(Effect.orDie(ctx.reportMetric("score", n)), n))
  const finish = Task.make("finish", (n: number) => n % 2 === 1 ? Effect.fail(new FatalError({ message: "odd" })) : Effect.succeed(n))
  return { ...withTemplate(study, Pipeline.make("scored", report, finish), Array.from({ length: cases }, (_, i) => i), "scored"), pipelinesPerTrial: cases }
}

/**
 * `study` with every trial running `template` over `inputs` instead of the fixture's own
 * pipeline (each member's definition digest gets `-SUFFIX`, so that it is its own definition).
 */
const withTemplate = (
  study: Study.StudyInput,
  template: Pipeline.Template<any, any, any>,
  inputs: ReadonlyArray<number>,
  suffix: string
): Study.StudyInput => ({
  ...study,
  suiteFor: (version) => {
    const base = study.suiteFor(version) as Suite.Suite<any, any, any>
    return {
      ...base,
      experiments: base.experiments.map((m: Suite.Member<any, any, any>) =>
        Suite.member(m.id, () => template.map([...inputs]), { definitionDigest: `${m.id}-${suffix}` })
      )
    }
  }
})

// ---------------------------------------------------------------------------------------------
// Settlement rules (pure)
// ---------------------------------------------------------------------------------------------

const stop = (when: "successfulTrials" | "deadline" | "manual", running: "drain" | "cancel"): StopFired => ({
  condition: when === "successfulTrials" ? { when, count: 1, running } : when === "deadline" ? { when, at: 0, running } : { when, running },
  reason: `${when} fired`,
  at: 1,
  running
})

const facts = (over: Partial<Study.TrialFacts> = {}): Study.TrialFacts => ({
  admitted: 3,
  sourceExhausted: true,
  sourceError: null,
  byState: { succeeded: 3 },
  metrics: { accuracy: 0.9 },
  budgetSpent: null,
  stop: null,
  ...over
})

const accuracy: ReadonlyArray<Study.StudyObjective> = [
  { metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.8 } }
]

describe("Study.settleTrial", () => {
  const cases: ReadonlyArray<readonly [string, Partial<Study.TrialFacts>, string, string]> = [
    ["every pipeline succeeded, source read to its end", {}, "succeeded", "3 pipelines succeeded"],
    ["a pipeline failed", { byState: { succeeded: 2, failed: 1 } }, "failed", "1 pipeline failed"],
    ["its source failed", { sourceError: "bad row 3", sourceExhausted: false }, "failed", "its source failed: bad row 3"],
    ["a hard constraint broken", { metrics: { accuracy: 0.5 } }, "failed", "hard constraint accuracy >= 0.8 broken: 0.5"],
    ["budget spent mid-way", { byState: { succeeded: 1 }, budgetSpent: "calls" }, "budget_exhausted", "its calls budget is spent"],
    [
      "a stop fired before it submitted anything",
      { admitted: 0, byState: {}, sourceExhausted: false, stop: stop("successfulTrials", "drain") },
      "not_started",
      "never started: successfulTrials fired"
    ],
    [
      "cancelled mid-way",
      { byState: { succeeded: 1, interrupted: 1 }, stop: stop("deadline", "cancel") },
      "cancelled",
      "cancelled: deadline fired; 1 of 3 submitted pipelines ended"
    ],
    [
      "started (the window began it, a call used) but stopped before any pipeline of it was stored (drain)",
      { admitted: 0, byState: {}, sourceExhausted: false, stop: stop("manual", "drain"), started: true },
      "incomplete",
      "started, then stopped before any pipeline of it was submitted: manual fired; resume continues it"
    ],
    [
      "started but stopped before any pipeline of it was stored (cancel)",
      { admitted: 0, byState: {}, sourceExhausted: false, stop: stop("manual", "cancel"), started: true },
      "cancelled",
      "cancelled: manual fired; no pipeline of it ran yet; resume continues it"
    ],
    ["drained mid-way by a condition (not manual)", { byState: { succeeded: 1 }, stop: stop("successfulTrials", "drain") }, "incomplete", "stopped after it started: successfulTrials fired; 1 of 3 submitted pipelines ended"],
    ["interrupted mid-way, no stop", { byState: { succeeded: 1, interrupted: 1 } }, "incomplete", "1 of 3 submitted pipelines ended"],
    // the value with 4 significant digits, as the report prints figures (tester16 F10.4: was 0.6666666666666666)
    ["a hard constraint broken by a value with many digits", { metrics: { accuracy: 2 / 3 } }, "failed", "hard constraint accuracy >= 0.8 broken: 0.6667"],
    [
      "budget spent with the plan's count known: every count says what it counts",
      { admitted: 16, byState: { succeeded: 9, pending: 7 }, sourceExhausted: false, budgetSpent: "costUsd", planned: 24 },
      "budget_exhausted",
      "its cost budget is spent: 9 of 24 planned pipelines ended, 16 submitted; source not read to its end"
    ],
    [
      "stored more than this run admitted (an earlier run's): admitted counts the larger",
      { admitted: 2, byState: { succeeded: 3, interrupted: 1 }, stop: stop("manual", "drain"), planned: 24 },
      "incomplete",
      "stopped after it started: manual fired; 3 of 24 planned pipelines ended, 4 submitted; resume continues it"
    ],
    [
      "every pipeline ended but over its budget",
      { overBudget: ["cost $0.0013 of $0.0010, 30% over"] },
      "budget_exhausted",
      "every pipeline ended, but over its budget: cost $0.0013 of $0.0010, 30% over; it never counts as a best"
    ],
    // `assay study stop`'s reason, quoted whole: no parentheses of its own (tester17af F10)
    [
      "drained by `assay study stop` mid-way",
      { byState: { succeeded: 1 }, stop: stopOfRequest({ id: 1, studyId: "s", at: 0, running: "drain", by: "pid 7 on vm", handledAt: null }) },
      "incomplete",
      "stopped after it started: manual stop requested by pid 7 on vm at 1970-01-01T00:00:00.000Z; running trials drain; 1 of 3"
    ],
    [
      "never started: `assay study stop --cancel` came first",
      { admitted: 0, byState: {}, sourceExhausted: false, stop: stopOfRequest({ id: 1, studyId: "s", at: 0, running: "cancel", by: "pid 7 on vm", handledAt: null }) },
      "not_started",
      "never started: manual stop requested by pid 7 on vm at 1970-01-01T00:00:00.000Z; running trials cancelled"
    ],
    ["source not read to its end", { sourceExhausted: false }, "incomplete", "source not read to its end"],
    ["fewer stored than submitted (skipped for budget)", { byState: { succeeded: 2 } }, "incomplete", "2 of 3"]
  ]
  for (const [title, over, status, reason] of cases) {
    it(`${title} -> ${status}`, () => {
      const settled = Study.settleTrial(facts(over), accuracy)
      assert.strictEqual(settled.status, status)
      assert.include(settled.reason, reason)
      // the summary line prints it in parentheses: it never holds parentheses of its own
      assert.notMatch(settled.reason, /[()]/)
      assert.strictEqual(Study.trialSucceeded(facts(over), accuracy), status === "succeeded")
      assert.strictEqual(Study.isEligible(settled.status), status === "succeeded")
      if (status !== "not_started") assert.notInclude(settled.reason, "never started")
      if (over.stop?.condition.when !== "manual") assert.notInclude(settled.reason, "resume continues it")
    })
  }

  it("a failure wins over a spent budget and a stop; a missing constraint metric is not a broken constraint", () => {
    assert.strictEqual(
      Study.settleTrial(facts({ byState: { failed: 1 }, budgetSpent: "tokens", stop: stop("manual", "cancel") }), accuracy).status,
      "failed"
    )
    assert.strictEqual(Study.settleTrial(facts({ metrics: {} }), accuracy).status, "succeeded")
  })

  it("compares with every operator", () => {
    const table: ReadonlyArray<readonly [Study.MetricOp, boolean]> = [[">", false], [">=", true], ["<", false], ["<=", true], ["==", true], ["!=", false]]
    for (const [op, expected] of table) assert.strictEqual(Study.compare(0.8, op, 0.8), expected, op)
  })
})

describe("Study.settleStudy", () => {
  const t = (status: Study.TrialReport["status"], metrics: Record<string, number> | null = { accuracy: 0.9 }, brokeConstraint = false) => ({
    status,
    metrics,
    brokeConstraint
  })
  const objectives: ReadonlyArray<Study.StudyObjective> = [{ metric: "accuracy", direction: "maximize" }]
  const cases: ReadonlyArray<readonly [string, Study.StudyFacts, string]> = [
    ["one succeeded, all settled", { trials: [t("succeeded"), t("failed")], stoppedEarly: false, interrupted: false }, "completed"],
    ["every trial failed", { trials: [t("failed"), t("failed")], stoppedEarly: false, interrupted: false }, "failed"],
    [
      "none succeeded: failed, budget spent, incomplete",
      { trials: [t("failed"), t("budget_exhausted"), t("incomplete")], stoppedEarly: false, interrupted: false },
      "failed"
    ],
    [
      "stopped early with a comparable result",
      { trials: [t("succeeded"), t("not_started"), t("cancelled")], stoppedEarly: true, interrupted: false },
      "stopped_with_results"
    ],
    ["stopped early with nothing succeeded", { trials: [t("cancelled"), t("not_started")], stoppedEarly: true, interrupted: false }, "cancelled"],
    [
      "succeeded trials lack an objective's metric",
      { trials: [t("succeeded", {}), t("succeeded")], stoppedEarly: false, interrupted: false },
      "inconclusive"
    ],
    [
      "stopped early, succeeded trials without the objective's metric",
      { trials: [t("succeeded", {}), t("not_started")], stoppedEarly: true, interrupted: false },
      "inconclusive"
    ],
    [
      "every trial that ran to its end broke a hard constraint",
      { trials: [t("failed", { accuracy: 0.5 }, true), t("budget_exhausted")], stoppedEarly: false, interrupted: false },
      "inconclusive"
    ],
    ["interrupted by a signal", { trials: [t("succeeded"), t("incomplete")], stoppedEarly: false, interrupted: true }, "interrupted"],
    ["some trials not run yet", { trials: [t("succeeded"), t("pending")], stoppedEarly: false, interrupted: false }, "pending"]
  ]
  it("the reason counts the succeeded trials an objective's metric is missing for: all of them, or which (tester16e F3)", () => {
    const named = (label: string, metrics: Record<string, number> | null) => ({ ...t("succeeded", metrics), label })
    const all = Study.settleStudy({ trials: Array.from({ length: 18 }, (_, i) => named(`v0${1 + (i % 6)} r${1 + Math.floor(i / 6)}`, {})), stoppedEarly: false, interrupted: false }, objectives)
    assert.strictEqual(all.reason, "18 of 18 trials succeeded, but objective metric accuracy is missing for all 18 trials")
    const some = Study.settleStudy({
      trials: [named("v01 r1", { accuracy: 1 }), named("v04 r1", {}), named("v04 r2", {}), named("v05 r1", {}), named("v05 r2", {}), t("failed")],
      stoppedEarly: false,
      interrupted: false
    }, objectives)
    assert.strictEqual(some.reason, "5 of 6 trials succeeded, but objective metric accuracy is missing for 4 of 5 succeeded trials (v04 r1, v04 r2, v05 r1, …)")
  })

  for (const [title, f, status] of cases) {
    it(`${title} -> ${status}`, () => {
      assert.strictEqual(Study.settleStudy(f, objectives).status, status)
    })
  }

  it("a study where every trial failed never settles as a success", () => {
    for (const other of ["failed", "budget_exhausted", "cancelled", "incomplete", "not_started"] as const) {
      for (const stoppedEarly of [false, true]) {
        const s = Study.settleStudy({ trials: [t("failed"), t(other)], stoppedEarly, interrupted: false }, objectives).status
        assert.notInclude(["completed", "stopped_with_results"], s, `${other} stopped=${stoppedEarly}`)
      }
    }
  })
})

// ---------------------------------------------------------------------------------------------
// The catalog: memory and SQLite
// ---------------------------------------------------------------------------------------------

const input = (over: Partial<FreezeInput> = {}): FreezeInput => ({
  studyId: "demo",
  question: "q?",
  type: "compare",
  protocolDigest: "d1",
  protocolParts: { experiment: "e1", repeats: "3" },
  protocol: { repeats: 3 },
  newVersion: false,
  ...over
})

const tempRoot = () => nodePath.join(fs.mkdtempSync(nodePath.join(os.tmpdir(), "assay-study-")), "root")

const openRoot = (root: string) =>
  Effect.map(
    SuiteStore.make({ root, suiteId: "demo", layout: "combined", members: [], flushIntervalMs: 0 }),
    (h) => h.study
  )

const contract = (name: string, withCatalog: <A, E>(body: (c: StudyCatalogService) => Effect.Effect<A, E>) => Effect.Effect<A, E | unknown>) =>
  describe(`StudyCatalog (${name})`, () => {
    it.effect("freezes version 1, runs it again unchanged, refuses a change naming the parts, --new-version starts version 2", () =>
      withCatalog((c) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* c.freeze(input(), 10), { version: 1, created: true })
          assert.deepStrictEqual(yield* c.freeze(input(), 20), { version: 1, created: false })
          const refused = yield* Effect.flip(c.freeze(input({ protocolDigest: "d2", protocolParts: { experiment: "e1", repeats: "5" }, protocol: { repeats: 5 } }), 30))
          assert.strictEqual(refused._tag, "ConfigError")
          assert.include(refused.message, "repeats: 3 -> 5")
          assert.include(refused.message, "--new-version")
          assert.notInclude(refused.message, "experiment:")
          const unchanged = yield* Effect.flip(c.freeze(input({ newVersion: true }), 30))
          assert.include(unchanged.message, "unchanged")
          const v2 = yield* c.freeze(input({ protocolDigest: "d2", protocolParts: { experiment: "e1", repeats: "5" }, protocol: { repeats: 5 }, newVersion: true }), 40)
          assert.deepStrictEqual(v2, { version: 2, created: true })
          // the old version's digest now differs from the current one: refused again without the flag
          yield* Effect.flip(c.freeze(input(), 50))
          const versions = yield* c.versions("demo")
          assert.deepStrictEqual(versions.map((v) => [v.version, v.protocolDigest, v.protocolParts.repeats]), [[1, "d1", "3"], [2, "d2", "5"]])
          const row = Option.getOrThrow(yield* c.study("demo"))
          assert.strictEqual(row.currentVersion, 2)
          assert.strictEqual(row.createdAt, 10)
        })))

    it.effect("a file whose protocol is an earlier version's is recognised: the refusal names it, --protocol-version continues it", () =>
      withCatalog((c) =>
        Effect.gen(function*() {
          yield* c.freeze(input(), 10)
          yield* c.freeze(input({ protocolDigest: "d2", protocolParts: { experiment: "e1", repeats: "5" }, protocol: { repeats: 5 }, newVersion: true }), 20)
          // back to version 1's protocol
          const refused = yield* Effect.flip(c.freeze(input(), 30))
          assert.include(refused.message, "the file's protocol is version 1's, an earlier version")
          assert.include(refused.message, "--protocol-version 1")
          assert.deepStrictEqual(yield* c.freeze(input({ version: 1 }), 40), { version: 1, created: false })
          assert.strictEqual(Option.getOrThrow(yield* c.study("demo")).currentVersion, 1)
          // --protocol-version with another protocol, an unknown version, or with --new-version: refused
          const differs = yield* Effect.flip(c.freeze(input({ version: 2 }), 50))
          assert.include(differs.message, "not version 2's")
          assert.include((yield* Effect.flip(c.freeze(input({ version: 7 }), 50))).message, "has no version 7")
          assert.include((yield* Effect.flip(c.freeze(input({ version: 1, newVersion: true }), 50))).message, "--protocol-version")
          assert.deepStrictEqual((yield* c.versions("demo")).map((v) => v.version), [1, 2], "no version created")
        })))

    it.effect("a version frozen with a previous digest of the protocol matches it and is upgraded; a change is named against its format", () =>
      withCatalog((c) =>
        Effect.gen(function*() {
          // what an earlier build froze: digest d0, its experiment part e0 (the run section digested)
          yield* c.freeze(input({ protocolDigest: "d0", protocolParts: { experiment: "e0", repeats: "3" } }), 10)
          const previousProtocols = [{ digest: "d0", parts: { experiment: "e0", repeats: "3" } }]
          // another repeats is a change, named alone (not the experiment part, whose format differs)
          const changed = yield* Effect.flip(c.freeze(
            input({ protocolParts: { experiment: "e1", repeats: "5" }, protocol: { repeats: 5 }, protocolDigest: "d5", previousProtocols: [{ digest: "d0-5", parts: { experiment: "e0", repeats: "5" } }] }),
            15
          ))
          assert.include(changed.message, "repeats: 3 -> 5")
          assert.notInclude(changed.message, "experiment:")
          assert.deepStrictEqual(yield* c.freeze(input({ previousProtocols }), 20), { version: 1, created: false, upgraded: true })
          const [v] = yield* c.versions("demo")
          assert.deepStrictEqual([v!.protocolDigest, v!.protocolParts], ["d1", { experiment: "e1", repeats: "3" }])
          // upgraded once: the next run matches the current digest
          assert.deepStrictEqual(yield* c.freeze(input({ previousProtocols }), 30), { version: 1, created: false })
          assert.deepStrictEqual((yield* c.versions("demo")).map((x) => x.version), [1])
        })))

    it.effect("registers trials once, settles them, keeps usage in the ledger and takes manual stop requests", () =>
      withCatalog((c) =>
        Effect.gen(function*() {
          yield* c.freeze(input(), 1)
          const trial = { version: 1, variantId: "v01", variantKey: "{}", variant: { a: 1 }, repeat: 1, seedable: true }
          yield* c.registerTrials("demo", [{ ...trial, trialId: "p1-v01-r1" }, { ...trial, trialId: "p1-v01-r2", repeat: 2 }], 2)
          const ledger = c.ledger("demo")
          yield* ledger.addUsage("p1-v01-r1", { calls: 2, tokens: 100, costUsd: 0.01, timeMs: 50 }, 3)
          yield* ledger.addUsage("p1-v01-r1", { calls: 1, tokens: 10, costUsd: 0.001, timeMs: 5 }, 4)
          // registering again keeps the row (and its usage)
          yield* c.registerTrials("demo", [{ ...trial, trialId: "p1-v01-r1" }], 5)
          const usage = yield* ledger.usage(["p1-v01-r1", "p1-v01-r2", "nope"])
          assert.deepStrictEqual(usage.get("p1-v01-r1")!.calls, 3)
          assert.deepStrictEqual(usage.get("p1-v01-r1")!.tokens, 110)
          assert.closeTo(usage.get("p1-v01-r1")!.costUsd, 0.011, 1e-12)
          assert.deepStrictEqual(usage.get("p1-v01-r2"), { calls: 0, tokens: 0, costUsd: 0, timeMs: 0 })
          assert.deepStrictEqual(usage.get("nope"), { calls: 0, tokens: 0, costUsd: 0, timeMs: 0 })
          yield* c.settle([{ trialId: "p1-v01-r1", status: "succeeded", reason: "ok", metrics: { accuracy: 0.5 }, startedAt: 6, endedAt: 7 }], 7)
          const rows = yield* c.trials("demo", 1)
          assert.deepStrictEqual(rows.map((r) => [r.trialId, r.status, r.metrics]), [
            ["p1-v01-r1", "succeeded", { accuracy: 0.5 }],
            ["p1-v01-r2", "pending", null]
          ])
          assert.strictEqual(rows[0]!.repeat, 1)
          assert.deepStrictEqual(rows[0]!.variant, { a: 1 })
          // what the settlement counted is kept with it (schema version 15, tester16b)
          assert.isUndefined(rows[0]!.settled)
          const settled = { metricsOver: { succeeded: 12, planned: 40 }, judgeCostUsd: 0.003 }
          yield* c.settle([{ trialId: "p1-v01-r2", status: "incomplete", reason: "stopped", metrics: { accuracy: 0.75 }, startedAt: 6, endedAt: null, settled }], 8)
          assert.deepStrictEqual((yield* c.trials("demo", 1)).find((r) => r.trialId === "p1-v01-r2")!.settled, settled)

          assert.isNull(yield* ledger.stopRequested)
          yield* c.requestStop("demo", { running: "cancel", by: "pid 1 on h" }, 100)
          const fired = yield* ledger.stopRequested
          assert.strictEqual(fired?.running, "cancel")
          assert.strictEqual(fired?.condition.when, "manual")
          assert.include(fired?.reason, "pid 1 on h")
          yield* ledger.recordStop(fired!)
          assert.isNull(yield* ledger.stopRequested)
          const row = Option.getOrThrow(yield* c.study("demo"))
          assert.strictEqual(row.stoppedAt, 100)
          assert.deepStrictEqual(row.stopCondition, { when: "manual", running: "cancel" })
          // a request written while nothing ran is dropped when a run starts
          yield* c.requestStop("demo", { running: "drain", by: "x" }, 200)
          yield* c.dropStopRequests("demo", 300)
          assert.isNull(yield* ledger.stopRequested)
        })))
  })

contract("memory", (body) => Effect.flatMap(StudyCatalog, body).pipe(Effect.provide(layerMemory)))
contract("SQLite", (body) => Effect.scoped(Effect.flatMap(openRoot(tempRoot()), body)).pipe(Effect.provide(NodeFileSystem.layer)))

describe("StudyCatalog (SQLite): a root from before schema version 15", () => {
  it.effect("reads its trials without settled counts (no settled_json column), and a writer migrates it", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* openRoot(root)
        yield* c.freeze(input(), 1)
        yield* c.registerTrials("demo", [{ trialId: "p1-v01-r1", version: 1, variantId: "v01", variantKey: "{}", variant: {}, repeat: 1, seedable: false }], 1)
        yield* c.settle([{ trialId: "p1-v01-r1", status: "succeeded", reason: "ok", metrics: { accuracy: 1 }, startedAt: 1, endedAt: 2 }], 2)
      }))
      // as the build before this one left it: no column, schema version 14
      const file = fs.readdirSync(root).map((f) => nodePath.join(root, f)).find((f) => f.endsWith("state.db"))!
      const db = new Database(file)
      db.exec("ALTER TABLE study_trials DROP COLUMN settled_json")
      // (and without version 17's ledger event columns)
      toVersion16(db)
      db.prepare("UPDATE store_meta SET value = '14' WHERE key = 'schema_version'").run()
      db.prepare("DELETE FROM effect_sql_migrations WHERE migration_id >= 15").run()
      db.close()
      const read = yield* Effect.scoped(Effect.gen(function*() {
        const h = yield* SuiteStore.makeRead(root)
        return yield* h.study.trials("demo", 1)
      }))
      assert.deepStrictEqual(read.map((r) => [r.trialId, r.status, r.metrics, r.settled]), [["p1-v01-r1", "succeeded", { accuracy: 1 }, undefined]])
      // a writer brings it to version 15, and settles with the counts
      yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* openRoot(root)
        yield* c.settle([{ trialId: "p1-v01-r1", status: "succeeded", reason: "ok", metrics: { accuracy: 1 }, startedAt: 1, endedAt: 2, settled: { metricsOver: { succeeded: 4, planned: 4 } } }], 3)
        assert.deepStrictEqual((yield* c.trials("demo", 1))[0]!.settled, { metricsOver: { succeeded: 4, planned: 4 } })
      }))
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})

describe("StudyCatalog (SQLite) across processes", () => {
  it.effect("usage, settlements and versions survive a reopen; another process's stop request is seen by the writer", () =>
    Effect.gen(function*() {
      const root = tempRoot()
      yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* openRoot(root)
        yield* c.freeze(input(), 1)
        yield* c.registerTrials("demo", [{ trialId: "p1-v01-r1", version: 1, variantId: "v01", variantKey: "{}", variant: {}, repeat: 1, seedable: false }], 1)
        yield* c.ledger("demo").addUsage("p1-v01-r1", { calls: 4, tokens: 40, costUsd: 0, timeMs: 1000 }, 2)
      }))
      yield* Effect.scoped(Effect.gen(function*() {
        const c = yield* openRoot(root)
        const usage = yield* c.ledger("demo").usage(["p1-v01-r1"])
        assert.strictEqual(usage.get("p1-v01-r1")!.calls, 4)
        assert.strictEqual(usage.get("p1-v01-r1")!.timeMs, 1000)
        assert.strictEqual((yield* c.trials("demo"))[0]!.seedable, false)
        // the writer holds the root; a stop request comes through the file itself
        yield* StudyTables.requestStopInFile(nodePath.join(root, "state.db"), { studyId: "demo", running: "drain", by: "test", at: 5 })
        const fired = yield* c.ledger("demo").stopRequested
        assert.strictEqual(fired?.running, "drain")
      }))
      const missing = yield* Effect.flip(StudyTables.requestStopInFile(nodePath.join(root, "nope.db"), { studyId: "demo", running: "drain", by: "t", at: 1 }))
      assert.include(missing.message, "no study store")
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})

// ---------------------------------------------------------------------------------------------
// Study.run through the API (MemoryStore, TestClock)
// ---------------------------------------------------------------------------------------------

describe("Study.run", () => {
  it.effect("resume counts only what is left: a trial that ended before the interruption is not \"to run\" (tester16e F6)", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good"], repeats: 3 })
      // registered, never settled
      yield* Study.prepare(study)
      // as after kill -9: r1 ended (every pipeline terminal) but was never settled, r2 was running
      const ledger = (yield* StudyCatalog).ledger("demo")
      yield* ledger.markTrial!("p1-v01-r1", "running", 1)
      yield* ledger.markTrial!("p1-v01-r1", "ended", 2)
      yield* ledger.markTrial!("p1-v01-r2", "running", 1)
      const prepared = yield* Study.prepare(study, { resume: true })
      assert.strictEqual(prepared.toRun.length, 3)
      assert.deepStrictEqual(prepared.endedBefore, ["p1-v01-r1"])
      assert.strictEqual(Study.toRunText(prepared), "2 of 3 trials to run (1 ended before)")
      assert.strictEqual(Study.toRunText({ ...prepared, endedBefore: [] }), "3 of 3 trials to run")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a declared objective's metric no pipeline reports stops the study after the first 5 succeeded pipelines (tester16e F3)", () =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({ qualities: ["good", "good"], cases: 10, repeats: 2 })
      // the tasks report "accuracy"; the study reads "accurcy" (a misspelt name, or a task that never reports)
      const misspelt: Study.StudyInput = {
        ...study,
        metrics: [{ name: "acc", reducer: "mean", from: { metric: "accurcy" } }],
        objectives: [{ metric: "acc", direction: "maximize" }],
        reportingTasks: ["score"]
      }
      const refused = yield* Effect.flip(Study.run(misspelt))
      assert.strictEqual(refused._tag, "ConfigError")
      assert.include(refused.message, "metrics[0].from.metric: metric \"acc\": none of the first 5 succeeded pipelines reported metric \"accurcy\"")
      assert.include(refused.message, "the task that could is score")
      assert.include(refused.message, "the study stopped there")
      // stopped early: 4 trials × 10 cases planned, not all ran
      assert.isBelow(executions.size, 40)
      const catalog = yield* StudyCatalog
      assert.strictEqual(Option.getOrThrow(yield* catalog.study("demo")).status, "interrupted")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a declared objective's metric reported by some pipelines only is fine: the study runs to its end", () =>
    Effect.gen(function*() {
      // every case but case 0 reports it: with 4 trials, at most 4 of the first 5 succeeded
      // pipelines are a case 0, whatever order they run in
      const { study } = makeStudy({ qualities: ["good", "good"], cases: 10, repeats: 2, reportsAccuracy: (n) => n !== 0 })
      const sparse: Study.StudyInput = {
        ...study,
        metrics: [{ name: "acc", reducer: "mean", from: { metric: "accuracy" } }],
        objectives: [{ metric: "acc", direction: "maximize" }],
        reportingTasks: ["score"]
      }
      const report = yield* Study.run(sparse)
      assert.strictEqual(report.status, "completed")
      assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "succeeded", "succeeded", "succeeded"])
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("runs every trial, settles each by its outcome and the study as completed; only succeeded trials are eligible", () =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({
        qualities: ["good", "bad", "broken"],
        objectives: [{ metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.8 } }]
      })
      const report = yield* Study.run(study)
      assert.strictEqual(report.version, 1)
      assert.strictEqual(report.status, "completed")
      const byTrial = Object.fromEntries(report.trials.map((t) => [t.trialId, t]))
      assert.deepStrictEqual(
        report.trials.map((t) => [t.trialId, t.status]),
        [
          ["p1-v01-r1", "succeeded"],
          ["p1-v01-r2", "succeeded"],
          ["p1-v02-r1", "failed"],
          ["p1-v02-r2", "failed"],
          ["p1-v03-r1", "failed"],
          ["p1-v03-r2", "failed"]
        ]
      )
      assert.include(byTrial["p1-v02-r1"]!.reason, "hard constraint accuracy >= 0.8 broken: 0.5")
      // issue 16 trial: a trial that ran every case and broke a constraint has complete metrics
      // (not "partial:"); one whose pipelines failed has partial ones
      assert.isUndefined(byTrial["p1-v02-r1"]!.partialMetrics)
      assert.match(report.summary(), /p1-v02-r1 failed \(.*\) · \d+ calls? [^\n]* · accuracy 0\.5/)
      assert.notMatch(report.summary(), /p1-v02-r1 [^\n]*partial:/)
      assert.include(byTrial["p1-v03-r1"]!.reason, "pipelines failed")
      assert.closeTo(byTrial["p1-v01-r1"]!.metrics.accuracy!, 0.9, 1e-12)
      assert.deepStrictEqual(report.eligible, ["p1-v01-r1", "p1-v01-r2"])
      assert.deepStrictEqual(report.notStarted, [])
      // repeats are distinct pipelines: each (trial, case) ran once
      assert.strictEqual(executions.size, 6 * 3)
      assert.isTrue([...executions].every(([k, n]) => k.includes("-v03-") || n === 1))
      // the settlement is stored
      const catalog = yield* StudyCatalog
      const rows = yield* catalog.trials("demo", 1)
      assert.deepStrictEqual(rows.map((r) => r.status), report.trials.map((t) => t.status))
      assert.strictEqual(Option.getOrThrow(yield* catalog.study("demo")).status, "completed")
      assert.include(report.summary(), "study demo (protocol version 1): completed")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a trial served from the call cache says so beside its calls: hits and misses per trial (issue 18, tester18b N7)", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good"], repeats: 1 })
      // every case of a trial asks the same thing (one key): the first calls, the others are served
      const ask = Task.make("ask", { cache: true, cacheKey: () => Effect.succeed("same") }, (n: number) => Effect.succeed(n))
      const cached = withTemplate(study, Pipeline.make("cached", ask), [0, 1, 2], "cached")
      const report = yield* Study.run(cached)
      assert.deepStrictEqual(report.trials.map((t) => [t.trialId, t.cache]), [["p1-v01-r1", { hits: 2, misses: 1, costSavedUsd: null }]])
      // what was spent this time, and what the cache served instead (tester18d F3)
      assert.match(report.summary(), /p1-v01-r1 [^\n]*· 0 calls \(2 served from cache\) · cache misses 1 · tokens 0/)
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 1, cache: "readWrite" }))))

  it.effect("a study where every trial failed settles failed, with no eligible trial and no best", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["broken", "broken"], repeats: 1 })
      const report = yield* Study.run(study)
      assert.strictEqual(report.status, "failed")
      assert.deepStrictEqual(report.eligible, [])
      assert.include(report.summary(), "no trial succeeded: nothing to compare, no best")
      assert.deepStrictEqual(report.toJSON().eligible, [])
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a second run skips settled trials; a changed protocol is refused until --new-version starts version 2", () =>
    Effect.gen(function*() {
      const first = makeStudy({ qualities: ["good", "broken"], repeats: 1 })
      yield* Study.run(first.study)
      const before = [...first.executions.values()].reduce((a, b) => a + b, 0)
      const again = yield* Study.run(first.study)
      assert.isTrue(again.trials.every((t) => !t.ran))
      assert.deepStrictEqual(again.trials.map((t) => t.status), ["succeeded", "failed"])
      assert.strictEqual(again.status, "completed")
      // nothing executed by the second run
      assert.strictEqual([...first.executions.values()].reduce((a, b) => a + b, 0), before)

      const changed = makeStudy({ qualities: ["good", "broken"], repeats: 1, protocolTag: "v2" })
      const refused = yield* Effect.flip(Study.run(changed.study))
      assert.strictEqual(refused._tag, "ConfigError")
      assert.include(refused.message, "experiment: the base experiment's document or its tasks' code changed (exp-base -> exp-v2)")
      const v2 = yield* Study.run(changed.study, { newVersion: true })
      assert.strictEqual(v2.version, 2)
      assert.deepStrictEqual(v2.trials.map((t) => t.trialId), ["p2-v01-r1", "p2-v02-r1"])
      const catalog = yield* StudyCatalog
      assert.deepStrictEqual((yield* catalog.versions("demo")).map((v) => v.version), [1, 2])
      // version 1's trials are kept beside version 2's, never mixed in its report
      assert.strictEqual((yield* catalog.trials("demo", 1)).length, 2)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("resume refuses a study that never ran; --trial runs only the named trials and leaves the study pending", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "good"], repeats: 1 })
      const never = yield* Effect.flip(Study.run(study, { resume: true }))
      assert.include(never.message, "nothing to resume")
      const unknown = yield* Effect.flip(Study.run(study, { trials: ["p1-v09-r1"] }))
      assert.include(unknown.message, "--trial")
      assert.include(unknown.message, `"p1-v09-r1" is not a trial of version 1 (its trials p1-v01-r1, p1-v02-r1)`)
      // several unknown ids: the words agree with them
      const two = yield* Effect.flip(Study.run(study, { trials: ["p1-v08-r1", "p1-v09-r1"] }))
      assert.include(two.message, `"p1-v08-r1", "p1-v09-r1" are not trials of version 1`)
      // refused before any state is written: no study, no version, no trial rows
      const catalog = yield* StudyCatalog
      assert.isTrue(Option.isNone(yield* catalog.study("demo")), "a refused --trial froze nothing")
      assert.deepStrictEqual(yield* catalog.versions("demo"), [])
      assert.deepStrictEqual(yield* catalog.trials("demo"), [])
      const one = yield* Study.run(study, { trials: ["p1-v02-r1"] })
      assert.deepStrictEqual(one.trials.map((t) => [t.trialId, t.status, t.ran]), [
        ["p1-v01-r1", "pending", false],
        ["p1-v02-r1", "succeeded", true]
      ])
      assert.strictEqual(one.status, "pending")
      const rest = yield* Study.run(study, { resume: true })
      assert.deepStrictEqual(rest.trials.map((t) => t.ran), [true, false])
      assert.strictEqual(rest.status, "completed")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a stop that fired but left no trial unfinished is reported (not stored as the study's stop), and the study completes; a spent budget does not undo a complete trial", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "good", "good"], repeats: 1 })
      const fired: StopFired = { condition: { when: "successfulTrials", count: 1, running: "drain" }, reason: "1 trial succeeded", at: 0, running: "drain" }
      // the stand-in control lets every trial run (no window) and reports a stop and a spent budget
      const control: Study.StudyControlFactory = () =>
        Effect.succeed({ fired: Effect.succeed(fired), exhausted: Effect.succeed(new Map([["p1-v03-r1", "calls"]])) })
      const report = yield* Study.run(study, { control })
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.stop?.reason, "1 trial succeeded")
      // every trial ran to its end: the spent budget does not undo a complete trial
      assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "succeeded", "succeeded"])
      const catalog = yield* StudyCatalog
      const row = Option.getOrThrow(yield* catalog.study("demo"))
      assert.strictEqual(row.status, "completed")
      // it ended nothing early: `study status` and the report show no stop under `completed`
      assert.isNull(row.stopReason)
      assert.isNull(row.stopCondition)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a trial that began (a call used) when a Ctrl-C drain stopped the study is incomplete, not 'never started'; resume continues it", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "good", "good"], repeats: 1 })
      const fired: StopFired = {
        condition: { when: "manual", running: "drain" },
        reason: "SIGINT received",
        at: 0,
        running: "drain",
        signal: "SIGINT"
      }
      // the stand-in control: v01 runs; v02 began (one call used) and was stopped before its
      // first pipeline; v03 never started
      const control: Study.StudyControlFactory = ({ ledger }) =>
        Effect.succeed({
          window: {
            active: 3,
            mayStart: (id) =>
              id === "p1-v01-r1"
                ? Effect.succeed(true)
                : id === "p1-v02-r1"
                ? Effect.as(Effect.orDie(ledger.addUsage(id, { calls: 1, tokens: 0, costUsd: 0, timeMs: 0 }, 1)), false)
                : Effect.succeed(false),
            mayAdmit: () => Effect.succeed(true)
          },
          fired: Effect.succeed(fired),
          exhausted: Effect.succeed(new Map())
        })
      const report = yield* Study.run(study, { control })
      assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "incomplete", "not_started"])
      assert.strictEqual(report.trials[1]!.reason, "started, then stopped before any pipeline of it was submitted: SIGINT received; resume continues it")
      assert.strictEqual(report.trials[2]!.reason, "never started: SIGINT received")
      assert.deepStrictEqual(report.notStarted, ["p1-v03-r1"])
      assert.strictEqual(report.status, "stopped_with_results")
      assert.include(report.summary(), "stop: SIGINT received")
      const rest = yield* Study.run(study, { resume: true })
      assert.deepStrictEqual(rest.trials.map((t) => [t.trialId, t.status, t.ran]), [
        ["p1-v01-r1", "succeeded", false],
        ["p1-v02-r1", "succeeded", true],
        ["p1-v03-r1", "succeeded", true]
      ])
      assert.strictEqual(rest.status, "completed")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("successfulTrials (drain) under a window of 1: the first success stops the study; the started trial drains, the rest are not started", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({
        qualities: ["good", "good", "good"],
        repeats: 1,
        trialConcurrency: 1,
        stop: [{ when: "allTrialsTerminal" }, { when: "successfulTrials", count: 1, running: "drain" }],
        objectives: [{ metric: "accuracy", direction: "maximize" }, { metric: "calls", direction: "minimize" }]
      })
      const report = yield* Study.run(study)
      // the window holds v01 until its last pipeline ended (issue 16, t16c: not only until it
      // submitted its last case); v01's success then stops the study: v02 and v03 never start
      assert.deepStrictEqual(report.trials.map((t) => t.status), ["succeeded", "not_started", "not_started"])
      assert.deepStrictEqual(report.notStarted, ["p1-v02-r1", "p1-v03-r1"])
      assert.strictEqual(report.stop?.condition.when, "successfulTrials")
      assert.strictEqual(report.status, "stopped_with_results")
      assert.deepStrictEqual(report.eligible, ["p1-v01-r1"])
      // a trial that never started has no metrics: the built-in calls (0) is not printed as partial
      assert.deepStrictEqual(report.trials[2]!.metrics, {})
      const line = report.summary().split("\n").find((l) => l.includes("p1-v03-r1 not started"))!
      assert.notInclude(line, "partial")
      // resume: the trial settled earlier counts (1 succeeded), so the condition holds before
      // anything starts: v02 and v03 stay not started and the study stays stopped with results
      const rest = yield* Study.run(study, { resume: true })
      assert.strictEqual(rest.stop?.condition.when, "successfulTrials")
      assert.strictEqual(rest.stop?.reason, "1 trial succeeded (the condition asks for 1)")
      assert.deepStrictEqual(rest.trials.map((t) => t.status), ["succeeded", "not_started", "not_started"])
      assert.strictEqual(rest.status, "stopped_with_results")
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 1, maxAdmitted: 1 }))))

  it.effect("a deadline already past is refused before the protocol is frozen (nothing written, nothing run)", () =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({
        qualities: ["good", "good"],
        repeats: 1,
        stop: [{ when: "deadline", at: 0, running: "cancel" }] // epoch 0: already passed on the TestClock
      })
      const refused = yield* Effect.flip(Study.run(study))
      assert.strictEqual(refused._tag, "ConfigError")
      assert.include(refused.message, "stop[0].at: the deadline 1970-01-01T00:00:00.000Z has already passed")
      assert.strictEqual(executions.size, 0)
      const catalog = yield* StudyCatalog
      assert.isTrue(Option.isNone(yield* catalog.study("demo")))
      assert.deepStrictEqual(yield* catalog.versions("demo"), [])
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a deadline that passes between runs: resume of the frozen version settles it without running anything", () =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({
        qualities: ["good", "good"],
        repeats: 1,
        stop: [{ when: "deadline", at: 10_000, running: "cancel" }]
      })
      const one = yield* Study.run(study, { trials: ["p1-v01-r1"] })
      assert.strictEqual(one.trials[0]!.status, "succeeded")
      yield* TestClock.adjust("20 seconds")
      const rest = yield* Study.run(study, { resume: true })
      assert.strictEqual(rest.stop?.condition.when, "deadline")
      assert.deepStrictEqual(rest.trials.map((t) => t.status), ["succeeded", "not_started"])
      assert.strictEqual(rest.status, "stopped_with_results")
      assert.strictEqual(executions.size > 0, true)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a per-trial calls budget: exactly the limit is used; the trial settles budget_exhausted and its usage is stored", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({
        qualities: ["good"],
        repeats: 1,
        cases: 4,
        leases: true,
        budget: { perTrial: { calls: 2 }, total: {} }
      })
      const report = yield* Study.run(study)
      const t = report.trials[0]!
      assert.strictEqual(t.status, "budget_exhausted")
      assert.include(t.reason, "calls budget is spent")
      assert.strictEqual(t.usage.calls, 2)
      assert.strictEqual(t.usage.tokens, 200)
      assert.strictEqual(report.status, "failed")
      const catalog = yield* StudyCatalog
      const usage = yield* catalog.ledger("demo").usage(["p1-v01-r1"])
      assert.strictEqual(usage.get("p1-v01-r1")!.calls, 2)
      // its metric covers 2 of 4 cases: marked partial, in the summary and the JSON
      assert.isTrue(t.partialMetrics)
      assert.include(report.summary(), "p1-v01-r1 budget exhausted")
      // the code word stays in the machine-readable fields only, never in the text a person reads
      assert.notInclude(report.summary(), "budget_exhausted")
      assert.strictEqual(report.trials.find((t) => t.trialId === "p1-v01-r1")!.status, "budget_exhausted")
      assert.include(report.summary(), "· partial (2 pipelines): accuracy")
      assert.deepStrictEqual(t.metricsOver, { succeeded: 2, planned: null })
      assert.isUndefined(t.overshoot, "exactly the limit: no overshoot")
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 1, maxAdmitted: 1 }))))

  it.effect("a budget reached while pipelines run is overshot: the row says by how much and that the budget is a start gate", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({
        qualities: ["good"],
        repeats: 1,
        cases: 4,
        leases: true,
        budget: { perTrial: { tokens: 50 }, total: {} }
      })
      const report = yield* Study.run(study)
      const t = report.trials[0]!
      assert.strictEqual(t.status, "budget_exhausted")
      // 100 tokens a call: the first pipeline started under the limit (nothing known of its
      // cost yet) and took the trial past it; nothing more started
      assert.deepStrictEqual(t.overshoot, ["tokens 100 of 50, 100% over"])
      assert.include(report.summary(), "over budget: tokens 100 of 50, 100% over")
      assert.strictEqual(t.reason, "its tokens budget is spent: 100 used of 50; 1 of 1 submitted pipeline ended; source not read to its end")
      assert.include(report.summary(), "a budget is a start gate")
      assert.deepStrictEqual((report.toJSON().trials as Array<{ overshoot?: unknown }>)[0]!.overshoot, t.overshoot)
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 1, maxAdmitted: 1 }))))

  {
    it.effect("no prior: one pipeline at a time until one ended, then by the mean (concurrency 4, calls reporting after 1 s)", () =>
      Effect.gen(function*() {
        const { study } = makeStudy({
          qualities: ["good"],
          repeats: 1,
          cases: 4,
          leases: true,
          callMs: 1000,
          budget: { perTrial: { tokens: 250 }, total: {} }
        })
        const fiber = yield* Effect.fork(Study.run(study))
        while (Option.isNone(yield* Fiber.poll(fiber))) yield* TestClock.adjust("500 millis")
        const t = (yield* Fiber.join(fiber)).trials[0]!
        assert.strictEqual(t.status, "budget_exhausted")
        // the first alone (100), then a mean of 100: the second fits (200), the third does not
        // (300 > 250). Before (issue 16 F1), the first wave of 4 started unreserved: 400
        assert.strictEqual(t.usage.tokens, 200)
        assert.include(t.reason, "its tokens budget has no room for another pipeline: 200 used of 250; the next is estimated at 100, the mean of 2 ended pipelines")
      }).pipe(Effect.provide(studyEnv("demo", { concurrency: 4, maxAdmitted: 4 }))))
  }

  it.effect("a trial its tokens budget stopped, run again by name: nothing more starts (the mean comes from its stored pipelines)", () =>
    Effect.gen(function*() {
      const { executions, study } = makeStudy({
        qualities: ["good"],
        repeats: 1,
        cases: 6,
        leases: true,
        budget: { perTrial: { tokens: 250 }, total: {} }
      })
      const first = (yield* Study.run(study)).trials[0]!
      assert.strictEqual(first.status, "budget_exhausted")
      assert.strictEqual(first.usage.tokens, 200)
      const ran = [...executions.values()].reduce((a, b) => a + b, 0)
      assert.strictEqual(ran, 2)
      const again = (yield* Study.run(study, { trials: ["p1-v01-r1"] })).trials[0]!
      assert.strictEqual([...executions.values()].reduce((a, b) => a + b, 0), 2, "no pipeline ran")
      assert.strictEqual(again.usage.tokens, 200)
      assert.strictEqual(again.status, "budget_exhausted")
      assert.include(again.reason, "the mean of 2 ended pipelines")
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 4, maxAdmitted: 4 }))))

  it.effect("a trial that ran every pipeline but ended over its budget is budget_exhausted, never succeeded nor a best", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({
        qualities: ["good"],
        repeats: 1,
        cases: 1,
        leases: true,
        budget: { perTrial: { tokens: 50 }, total: {} }
      })
      const report = yield* Study.run(study)
      const t = report.trials[0]!
      // its only call started at 0 tokens, under the limit, and ended at 100
      assert.strictEqual(t.usage.tokens, 100)
      assert.strictEqual(t.status, "budget_exhausted")
      assert.include(t.reason, "over its budget: tokens 100 of 50, 100% over; it never counts as a best")
      assert.deepStrictEqual(report.eligible, [])
      // it ran every pipeline: its metrics are complete, never shown as "partial:"
      assert.isUndefined(t.partialMetrics)
      assert.notInclude(report.summary(), "partial:")
      assert.notStrictEqual(report.status, "completed")
    }).pipe(Effect.provide(studyEnv("demo", { concurrency: 1, maxAdmitted: 1 }))))

  it.effect("a trial's pipeline-level metrics average its succeeded pipelines only, and say how many (n of N) when partial", () =>
    Effect.gen(function*() {
      // each pipeline reports score = n in its first task; the second task fails on odd cases:
      // the failed pipelines' scores (1, 3) must not enter the trial's mean (0 and 2: 1, not 1.5)
      const { study } = makeStudy({ qualities: ["good"], repeats: 1, cases: 4, objectives: [{ metric: "score", direction: "maximize" }] })
      const report = yield* Study.run(withScores(study, 4))
      const t = report.trials[0]!
      assert.strictEqual(t.status, "failed")
      assert.strictEqual(t.metrics.score, 1)
      assert.isTrue(t.partialMetrics)
      assert.deepStrictEqual(t.metricsOver, { succeeded: 2, planned: 4 })
      assert.include(report.summary(), "· partial (2 of 4 pipelines): score 1")
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("completed does not hide a variant without a succeeded trial: it is a limitation (summary, JSON, reason)", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "broken"], repeats: 2 })
      const report = yield* Study.run(study)
      assert.strictEqual(report.status, "completed", "the study ran to its end with a result")
      assert.deepStrictEqual(report.limitations, [
        "variant v02 (quality=broken, index=1) has no succeeded trial (2 failed): no result for it can be compared"
      ])
      assert.include(report.reason, "1 variant without a succeeded trial")
      assert.include(report.summary(), "limitation: variant v02")
      assert.deepStrictEqual(report.toJSON().limitations, report.limitations)
    }).pipe(Effect.provide(studyEnv("demo"))))

  it.effect("a stop that fired only at the natural end is not printed as a stop", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good", "good"], repeats: 1, stop: [{ when: "successfulTrials", count: 2 }] })
      const report = yield* Study.run(study)
      assert.strictEqual(report.stop?.condition.when, "successfulTrials")
      assert.strictEqual(report.status, "completed")
      assert.isFalse(report.stoppedEarly)
      assert.notInclude(report.summary(), "stop:")
      // nor stored as the study's stop (what `study status` and `study report` print)
      const row = Option.getOrThrow(yield* (yield* StudyCatalog).study("demo"))
      assert.isNull(row.stopReason)
    }).pipe(Effect.provide(studyEnv("demo"))))
})

describe("StudyReport.summary: figures", () => {
  it.effect("a metric prints as every study view prints figures: from 10,000 up rounded, never 1.235e+4 (issue 16 item 3)", () =>
    Effect.gen(function*() {
      const { study } = makeStudy({ qualities: ["good"], repeats: 1 })
      const big = Task.make("big", (n: number, ctx) => Effect.as(Effect.orDie(ctx.reportMetric("latencyMs", 12345.678)), n))
      const report = yield* Study.run(withTemplate(study, Pipeline.make("big", big), [0, 1], "big"))
      assert.include(report.summary(), "latencyMs 12346")
      assert.notInclude(report.summary(), "e+4")
    }).pipe(Effect.provide(studyEnv("demo"))))
})
