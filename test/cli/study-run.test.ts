/**
 * `assay study run|resume|versions|stop|status` through `bin/assay` processes: settlement and
 * exit codes, the protocol freeze (refused change, `--new-version`, `versions`), the stop
 * request of another process, two processes on one study (the second refused), and SIGKILL +
 * resume of 9 variants × 3 repeats (exactly 27 trials settled, no task re-executed after its
 * checkpoint).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { NodeContext } from "@effect/platform-node"
import Database from "better-sqlite3"
import * as StudyConfig from "../../src/config/Study.js"
import type { Json } from "../../src/domain/Json.js"
import * as DomainStudy from "../../src/domain/Study.js"
import * as StudyRun from "../../src/cli/StudyRun.js"
import type * as Study from "../../src/services/Study.js"
import type { StopFired } from "../../src/services/StudyControl.js"
import { assay, root, start, write } from "../support/cli.js"
import { committedVisits, executions, query, waitFor } from "../support/killHarness.js"

/**
 * A study dir: an experiment over `cases` rows whose two tasks log every execution
 * (`<run> <pipelineId> <seq> <visit>`, the run index from `STUDY_RUN`) and sleep `ms`; the
 * variable `k` (enum 0..variants-1) is bound into the first task's arguments; the variant
 * `k == failK` fails its first task on every row; the second task fails unless `ctx.variables.k`
 * is its trial's `k` (the variables reach the trials' tasks). With `gated`, the first task of a
 * variant `k` in the list waits while the file `gate` exists (after creating `reached`): a test
 * holds a trial running for as long as it needs (a stop, a signal), whatever the
 * machine's speed, and then lets it finish.
 */
const studyDir = (o: {
  readonly variants: number
  readonly repeats: number
  readonly cases: number
  readonly ms?: number
  readonly failK?: number
  readonly trialConcurrency?: number
  readonly concurrency?: number
  readonly stop?: ReadonlyArray<unknown>
  /** Give the tasks a fixed `codeDigest` (a protocol digest computed in the test process matches the CLI's). */
  readonly pinnedCode?: boolean
  /** Hold the first task of these variants' trials while the study dir's `gate` file exists. */
  readonly gated?: ReadonlyArray<number>
}) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-study-cli-"))
  const log = path.join(dir, "exec.log")
  const gate = path.join(dir, "gate")
  const reached = path.join(dir, "reached")
  write(dir, "package.json", JSON.stringify({ type: "module" }))
  write(dir, "tasks.ts", [
    `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
    `import * as fs from "node:fs"`,
    `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
    `import { FatalError } from ${JSON.stringify(path.join(root, "src/domain/Errors.ts"))}`,
    `const note = (ctx: { pipelineId: string; seq: number; visit: number }) =>`,
    `  fs.appendFileSync(${JSON.stringify(log)}, [process.env.STUDY_RUN ?? "0", ctx.pipelineId, ctx.seq, ctx.visit].join(" ") + "\\n")`,
    `export const first = (k: number, failK: number, ms: number) =>`,
    `  Task.make("first", { parameters: { k, failK }${o.pinnedCode === true ? `, codeDigest: "first-1"` : ""} }, (n: number, ctx) => Effect.gen(function*() {`,
    `    if (ms > 0) yield* Effect.sleep(ms)`,
    ...(o.gated === undefined ? [] : [
      `    if (${JSON.stringify(o.gated)}.includes(k) && fs.existsSync(${JSON.stringify(gate)})) {`,
      `      fs.writeFileSync(${JSON.stringify(reached)}, String(k))`,
      `      while (fs.existsSync(${JSON.stringify(gate)})) yield* Effect.sleep(20)`,
      `    }`
    ]),
    `    if (k === failK) return yield* Effect.fail(new FatalError({ message: "variant " + k + " is broken" }))`,
    `    note(ctx)`,
    `    return { n, k }`,
    `  }))`,
    `export const second = (ms: number) =>`,
    `  Task.make("second", ${o.pinnedCode === true ? `{ codeDigest: "second-1" }, ` : ""}(r: { n: number; k: number }, ctx) => Effect.gen(function*() {`,
    `    if (ms > 0) yield* Effect.sleep(ms)`,
    `    if (ctx.variables.k !== r.k) return yield* Effect.fail(new FatalError({ message: "ctx.variables.k is " + JSON.stringify(ctx.variables.k) }))`,
    `    note(ctx)`,
    `    yield* ctx.reportMetric("accuracy", r.k === 0 ? 0.9 : 0.8)`,
    `    return r.n + r.k`,
    `  }))`
  ].join("\n"))
  const ms = o.ms ?? 0
  write(dir, "experiment.json", JSON.stringify({
    pipeline: {
      name: "cases",
      tasks: [
        { use: "./tasks.ts#first", args: [{ $var: "k" }, o.failK ?? -1, ms] },
        { use: "./tasks.ts#second", args: [ms] }
      ]
    },
    source: { range: { n: o.cases } }
  }))
  const study = {
    study: { id: "kstudy", question: "which k?", type: "compare" },
    protocol: { experiment: "./experiment.json" },
    output: { root: "out" },
    run: { concurrency: o.concurrency ?? 4, trialConcurrency: o.trialConcurrency ?? 3 },
    variables: [{ name: "k", type: "enum", values: Array.from({ length: o.variants }, (_, i) => i) }],
    baseline: { k: 0 },
    repeats: o.repeats,
    stop: o.stop ?? [{ when: "allTrialsTerminal" }],
    objectives: [{ metric: "accuracy", direction: "maximize" }]
  }
  const file = write(dir, "study.json", JSON.stringify(study))
  const rewrite = (change: (s: typeof study) => unknown) => write(dir, "study.json", JSON.stringify(change(study)))
  const db = path.join(dir, "out", "state.db")
  /** Closes the gate (held tasks wait from now on) and forgets an earlier `reached`. */
  const hold = () => {
    fs.rmSync(reached, { force: true })
    fs.writeFileSync(gate, "")
  }
  /** Until a held task waits at the gate (or `child` exited). */
  const held = (child: { readonly exitCode: number | null }) => waitFor(() => fs.existsSync(reached) || child.exitCode !== null, 60_000)
  const release = () => fs.rmSync(gate, { force: true })
  /** The study's recorded stop (`stopped_at`, Clock ms; null before any stop fired). */
  const stoppedAt = () => query<{ stopped_at: number | null }>(db, "SELECT stopped_at FROM studies WHERE study_id = 'kstudy'")[0]?.stopped_at ?? null
  /**
   * Until the running study has fired a stop newer than `after` (recorded with the ledger as it
   * fires, when no further trial may start), or `child` exited.
   */
  const stopFired = (child: { readonly exitCode: number | null }, after: number | null = null) =>
    waitFor(() => child.exitCode !== null || (stoppedAt() ?? -1) > (after ?? -1), 60_000)
  return { dir, log, file, rewrite, db, hold, held, release, stoppedAt, stopFired }
}

const trialRows = (db: string) =>
  query<{ trial_id: string; status: string; version: number }>(db, "SELECT trial_id, status, version FROM study_trials ORDER BY trial_id")

describe("assay study run", () => {
  it.live("runs and settles every trial: a broken variant fails, the study completes (exit 0); a rerun runs nothing", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 3, repeats: 2, cases: 3, failK: 2 })
      const r = yield* assay(["study", "run", s.file, "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(r.code, 0, r.stderr)
      const out = JSON.parse(r.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.status, "completed")
      assert.deepStrictEqual(out.trials.map((t: { trialId: string; status: string }) => [t.trialId, t.status]), [
        ["p1-v01-r1", "succeeded"],
        ["p1-v01-r2", "succeeded"],
        ["p1-v02-r1", "succeeded"],
        ["p1-v02-r2", "succeeded"],
        ["p1-v03-r1", "failed"],
        ["p1-v03-r2", "failed"]
      ])
      assert.deepStrictEqual(out.eligible, ["p1-v01-r1", "p1-v01-r2", "p1-v02-r1", "p1-v02-r2"])
      assert.closeTo(out.trials[0].metrics.accuracy, 0.9, 1e-9)
      const executed = executions(s.log).length
      const again = yield* assay(["study", "resume", s.file, "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(again.code, 0, again.stderr)
      assert.strictEqual(executions(s.log).length, executed)
      const status = yield* assay(["study", "status", s.file], { cwd: s.dir })
      assert.strictEqual(status.code, 0, status.stderr)
      assert.include(status.stdout, "study kstudy (protocol version 1): completed")
      assert.include(status.stdout, "p1-v03-r2")
    }))

  it.live("a study whose every trial fails exits 1 and reports no best", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 1, repeats: 2, cases: 2, failK: 0 })
      const r = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(r.code, 1, r.stderr)
      assert.include(r.stdout, "failed")
      assert.include(r.stdout, "no trial succeeded: nothing to compare, no best")
    }))

  // nine processes one after another: at a load of 15 on 2 cores that took over 60 s
  it.live("a changed protocol is refused (exit 2) naming the part; --new-version starts version 2; versions shows the diff", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 1, cases: 2 })
      assert.strictEqual((yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })).code, 0)
      s.rewrite((x) => ({ ...x, repeats: 2 }))
      const refused = yield* assay(["study", "run", s.file], { cwd: s.dir })
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(refused.stderr, "repeats")
      assert.include(refused.stderr, "--new-version")
      // the refusal is not buried under the plan (printed only once the study may run)
      assert.notInclude(refused.stderr, "max model calls")
      const pending = yield* assay(["study", "versions", s.file], { cwd: s.dir })
      assert.strictEqual(pending.code, 0, pending.stderr)
      assert.include(pending.stdout, "differs from version 1")
      const v2 = yield* assay(["study", "run", s.file, "--new-version", "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(v2.code, 0, v2.stderr)
      const out = JSON.parse(v2.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.version, 2)
      assert.deepStrictEqual(out.trials.map((t: { trialId: string }) => t.trialId), ["p2-v01-r1", "p2-v01-r2", "p2-v02-r1", "p2-v02-r2"])
      const versions = yield* assay(["study", "versions", s.file, "--json"], { cwd: s.dir })
      const v = JSON.parse(versions.stdout)
      assert.deepStrictEqual(v.versions.map((x: { version: number }) => x.version), [1, 2])
      assert.isTrue(v.versions[1].changed.some((c: string) => c.startsWith("repeats")))
      assert.isTrue(v.file.matchesCurrent)
      // version 1's trials are kept beside version 2's
      assert.deepStrictEqual(trialRows(s.db).map((t) => t.version), [1, 1, 2, 2, 2, 2])
      // back to version 1's protocol: recognised; --protocol-version 1 continues it (nothing to run again)
      s.rewrite((x) => x)
      const back = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(back.code, 2, back.stderr)
      assert.include(back.stderr, "the file's protocol is version 1's")
      assert.include(back.stderr, "--protocol-version 1")
      assert.include((yield* assay(["study", "versions", s.file], { cwd: s.dir })).stdout, "--protocol-version 1 to continue it")
      const v1 = yield* assay(["study", "resume", s.file, "--protocol-version", "1", "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(v1.code, 0, v1.stderr)
      assert.include(v1.stdout, `"version":1`, v1.stdout + v1.stderr)
    }), 180_000)

  it.live("an objective whose direction changed is refused (exit 2) with the old and new objectives in words, not digests", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 1, cases: 2 })
      const objectives = (calls: "minimize" | "maximize") => [
        { metric: "accuracy", direction: "maximize", hardConstraint: { op: ">=", value: 0.75 } },
        { metric: "calls", direction: calls }
      ]
      s.rewrite((x) => ({ ...x, objectives: objectives("minimize") }))
      const first = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(first.code, 0, first.stderr)
      s.rewrite((x) => ({ ...x, objectives: objectives("maximize") }))
      const refused = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(
        refused.stderr,
        "changed objectives: [accuracy ↑ (hard constraint >= 0.75), calls ↓] -> [accuracy ↑ (hard constraint >= 0.75), calls ↑]",
        refused.stderr
      )
      assert.include(refused.stderr, "--new-version")
      assert.notMatch(refused.stderr, /objectives: [0-9a-f]{8,}/, "no digest where words say it")
      // nothing ran under the changed protocol
      assert.deepStrictEqual(trialRows(s.db).map((t) => t.version), [1, 1])
      // a weight other than the default is said
      s.rewrite((x) => ({ ...x, objectives: [objectives("minimize")[0]!, { metric: "calls", direction: "minimize", weight: 2 }] }))
      const weighted = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(weighted.code, 2, weighted.stderr)
      assert.include(weighted.stderr, "-> [accuracy ↑ (hard constraint >= 0.75), calls ↓ (weight 2)]", weighted.stderr)
    }))

  it.live("the experiment's run section and pool capacities are not the protocol: changing them continues the version", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 1, cases: 2 })
      const base = JSON.parse(fs.readFileSync(path.join(s.dir, "experiment.json"), "utf8"))
      const withRun = (concurrency: number, capacity: number) =>
        write(s.dir, "experiment.json", { ...base, run: { concurrency }, pools: { spare: { capacity: capacity + 1, resources: [{ id: "a", capacity }] } } })
      withRun(2, 2)
      const first = yield* assay(["study", "run", s.file, "--trial", "p1-v01-r1", "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(first.code, 0, first.stderr)
      withRun(1, 5)
      const again = yield* assay(["study", "run", s.file, "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(again.code, 0, again.stderr)
      const out = JSON.parse(again.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.version, 1)
      assert.deepStrictEqual(trialRows(s.db).map((t) => [t.trial_id, t.version, t.status]), [["p1-v01-r1", 1, "succeeded"], ["p1-v02-r1", 1, "succeeded"]])
      // a variable still changes the protocol
      s.rewrite((x) => ({ ...x, variables: [{ name: "k", type: "enum", values: [0, 1, 2] }] }))
      const refused = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(refused.stderr, "changed variables")
      assert.include(refused.stderr, "--new-version")
      assert.notInclude(refused.stderr, "experiment:")
    }))

  it.live("a root frozen with the previous protocol digest (run section and capacities digested) resumes as the same version and is upgraded", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 1, cases: 2, pinnedCode: true })
      const doc = { ...JSON.parse(fs.readFileSync(path.join(s.dir, "experiment.json"), "utf8")), run: { concurrency: 2 }, pools: { spare: { resources: [{ id: "a", capacity: 3 }] } } }
      write(s.dir, "experiment.json", doc)
      const first = yield* assay(["study", "run", s.file, "--trial", "p1-v01-r1", "-q"], { cwd: s.dir })
      assert.strictEqual(first.code, 0, first.stderr)
      // what a build before 0.7.0 stored: the digest of the protocol with the whole experiment document
      const loaded = yield* StudyConfig.load(s.file, { env: {} }).pipe(Effect.provide(NodeContext.layer))
      // (and before 0.9.0 no `modules` part: the code files' contents were not digested)
      const { modules: _modules, ...current } = loaded.protocol
      const legacy: DomainStudy.Protocol = { ...current, experiment: { ...(loaded.protocol.experiment as Record<string, Json>), document: doc } }
      const legacyDigest = DomainStudy.protocolDigest(legacy)
      assert.notStrictEqual(legacyDigest, loaded.protocolDigest)
      const stored = () => query<{ protocol_digest: string; protocol_parts_json: string }>(s.db, "SELECT protocol_digest, protocol_parts_json FROM study_protocol_versions")
      assert.strictEqual(stored()[0]!.protocol_digest, loaded.protocolDigest)
      const conn = new Database(s.db)
      conn.prepare("UPDATE study_protocol_versions SET protocol_digest = ?, protocol_parts_json = ?")
        .run(legacyDigest, JSON.stringify(DomainStudy.protocolParts(legacy)))
      conn.close()
      // recognised (versions), and a real change is described without the digest format's difference
      const versions = JSON.parse((yield* assay(["study", "versions", s.file, "--json"], { cwd: s.dir })).stdout)
      assert.isTrue(versions.file.matchesCurrent)
      s.rewrite((x) => ({ ...x, repeats: 2 }))
      const refused = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(refused.code, 2, refused.stderr)
      assert.include(refused.stderr, "changed repeats")
      assert.notInclude(refused.stderr, "experiment:")
      s.rewrite((x) => x)
      const resumed = yield* assay(["study", "resume", s.file, "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const out = JSON.parse(resumed.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.version, 1)
      assert.deepStrictEqual(trialRows(s.db).map((t) => [t.trial_id, t.version, t.status]), [["p1-v01-r1", 1, "succeeded"], ["p1-v02-r1", 1, "succeeded"]])
      // the record now holds the current digest and parts
      assert.deepStrictEqual(stored(), [{ protocol_digest: loaded.protocolDigest, protocol_parts_json: JSON.stringify(loaded.protocolParts) }])
    }))

  it.live("stop with no process running exits 1; resume of a study that never ran exits 2", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 1, repeats: 1, cases: 1 })
      const never = yield* assay(["study", "resume", s.file], { cwd: s.dir })
      assert.strictEqual(never.code, 2, never.stderr)
      assert.include(never.stderr, "nothing to resume")
      const stop = yield* assay(["study", "stop", s.file], { cwd: s.dir })
      assert.strictEqual(stop.code, 1, stop.stderr)
      assert.include(stop.stderr, "nothing to stop")
    }))
})

describe("assay study run: a declared metric no task reports (fix16y's early stop, through bin/assay)", () => {
  it.live("stops after the first 5 succeeded pipelines: exit 2 naming metrics[0].from.metric, their checkpoints kept; once the file is fixed, --new-version runs the study to its end", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 2, cases: 8, concurrency: 2, trialConcurrency: 1 })
      // the tasks report "accuracy"; the study reads "accurcy"
      const withMetric = (from: string) => (x: Record<string, unknown>) => ({
        ...x,
        metrics: [{ name: "acc", reducer: "mean", from: { metric: from } }],
        objectives: [{ metric: "acc", direction: "maximize" }]
      })
      s.rewrite(withMetric("accurcy"))
      const r = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(r.code, 2, r.stdout + r.stderr)
      assert.include(r.stderr, "metrics[0].from.metric: metric \"acc\": none of the first 5 succeeded pipelines reported metric \"accurcy\"")
      assert.match(r.stderr, /the tasks? that could (?:is|are) [^;]*second/)
      assert.notMatch(r.stderr, /\n\s+at /) // a message, not a stack
      // stopped early, and nothing lost: every pipeline whose tasks both ran is stored succeeded
      const ran = executions(s.log)
      assert.isBelow(ran.length, 2 * 2 * 2 * 8)
      const finished = new Set(ran.filter((e) => e.key.endsWith(" 1 0")).map((e) => e.key.split(" ")[0]!))
      assert.isAtLeast(finished.size, 5)
      const stored = new Set(query<{ pipeline_id: string }>(s.db, "SELECT pipeline_id FROM pipelines WHERE state = 'succeeded'").map((p) => p.pipeline_id))
      for (const id of finished) assert.isTrue(stored.has(id), `pipeline ${id} ran to its end but is not stored succeeded`)
      assert.deepStrictEqual(query<{ status: string }>(s.db, "SELECT status FROM studies WHERE study_id = 'kstudy'").map((x) => x.status), ["interrupted"])
      // the file fixed: the metric is part of the protocol, so a plain resume is refused and
      // names --new-version (as the stop's message says); --new-version runs to the end
      s.rewrite(withMetric("accuracy"))
      const resumed = yield* assay(["study", "resume", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(resumed.code, 2, resumed.stderr)
      assert.include(resumed.stderr, "--new-version")
      const v2 = yield* assay(["study", "run", s.file, "--new-version", "--json", "-q"], { cwd: s.dir })
      assert.strictEqual(v2.code, 0, v2.stderr)
      const out = JSON.parse(v2.stdout.trim().split("\n").pop()!)
      assert.deepStrictEqual([out.version, out.status], [2, "completed"])
      assert.isTrue(out.trials.every((t: { status: string }) => t.status === "succeeded"))
      // version 1's stored pipelines are still there beside version 2's
      const after = new Set(query<{ pipeline_id: string }>(s.db, "SELECT pipeline_id FROM pipelines WHERE state = 'succeeded'").map((p) => p.pipeline_id))
      for (const id of stored) assert.isTrue(after.has(id))
    }), 180_000)
})

describe("assay study run: an objective's metric no task reports, in a study without metrics: (tester16f F4)", () => {
  it.live("stops after the first 5 succeeded pipelines: exit 2 at objectives[i].metric with a did-you-mean, not every trial run to 'missing'", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 2, cases: 8, concurrency: 2, trialConcurrency: 1 })
      // the tasks report "accuracy"; the objective reads "accurcy"; no metrics section
      // (and a third objective on the metric the tasks do report: tester16g F10, the list of what
      // they reported names it, and the did-you-mean still points to it)
      s.rewrite((x) => ({
        ...x,
        objectives: [{ metric: "latencyP95Ms", direction: "minimize" }, { metric: "accurcy", direction: "maximize" }, {
          metric: "accuracy",
          direction: "maximize"
        }]
      }))
      const r = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(r.code, 2, r.stdout + r.stderr)
      assert.include(r.stderr, "objectives[1].metric: objective \"accurcy\": none of the first 5 succeeded pipelines reported metric \"accurcy\"")
      assert.include(r.stderr, "(they reported \"accuracy\")")
      assert.include(r.stderr, "did you mean \"accuracy\"?")
      assert.notInclude(r.stderr, "objectives[2]")
      assert.notInclude(r.stderr, "objectives[0]")
      assert.notMatch(r.stderr, /\n\s+at /)
      const ran = executions(s.log)
      assert.isBelow(ran.length, 2 * 2 * 2 * 8)
      assert.deepStrictEqual(query<{ status: string }>(s.db, "SELECT status FROM studies WHERE study_id = 'kstudy'").map((x) => x.status), ["interrupted"])
    }), 180_000)
})

describe("assay study: refused commands leave nothing behind", () => {
  it.live("an unknown --trial and a past deadline exit 2 before the protocol is frozen; plan and validate warn of the deadline", () =>
    Effect.gen(function*() {
      const s = studyDir({ variants: 2, repeats: 1, cases: 1 })
      const banana = yield* assay(["study", "run", s.file, "--trial", "banana", "-q"], { cwd: s.dir })
      assert.strictEqual(banana.code, 2, banana.stderr)
      assert.include(banana.stderr, "--trial")
      const status = yield* assay(["study", "status", s.file], { cwd: s.dir })
      assert.include(status.stdout, "not run yet")
      const versions = yield* assay(["study", "versions", s.file], { cwd: s.dir })
      assert.include(versions.stdout, "no protocol version yet")
      s.rewrite((x) => ({ ...x, stop: [{ when: "deadline", at: "2020-01-01T00:00:00Z" }] }))
      const plan = yield* assay(["study", "plan", s.file], { cwd: s.dir })
      assert.strictEqual(plan.code, 0, plan.stderr)
      assert.include(plan.stderr, "warning: stop[0].at: the deadline 2020-01-01T00:00:00.000Z has already passed")
      const validate = yield* assay(["validate", "-c", s.file], { cwd: s.dir })
      assert.strictEqual(validate.code, 0, validate.stderr)
      assert.include(validate.stderr, "has already passed")
      const past = yield* assay(["study", "run", s.file, "-q"], { cwd: s.dir })
      assert.strictEqual(past.code, 2, past.stderr)
      assert.include(past.stderr, "stop[0].at")
      assert.include((yield* assay(["study", "versions", s.file], { cwd: s.dir })).stdout, "no protocol version yet")
      assert.strictEqual(executions(s.log).length, 0)
    }))
})

describe("assay study stop", () => {
  it.live("another process's stop request drains the running study: the started trials finish, the rest are not started", () =>
    Effect.promise(async () => {
      // 8 trials, one attempt at a time; the tasks are held (at the gate) until the study has
      // fired the stop: the trials started by then drain, the others never start, on any machine
      const s = studyDir({ variants: 8, repeats: 1, cases: 3, concurrency: 1, trialConcurrency: 1, gated: [0, 1, 2, 3, 4, 5, 6, 7] })
      s.hold()
      const run = start(["study", "run", s.file, "--json", "-q"], { cwd: s.dir })
      await s.held(run.child)
      const stop = await Effect.runPromise(assay(["study", "stop", s.file], { cwd: s.dir }))
      assert.strictEqual(stop.code, 0, stop.stderr)
      assert.include(stop.stdout, "stop requested")
      await s.stopFired(run.child)
      s.release()
      const done = await run.done
      assert.strictEqual(done.code, 0, done.stderr)
      const out = JSON.parse(done.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.status, "stopped_with_results")
      assert.strictEqual(out.stop.condition.when, "manual")
      assert.isAtLeast(out.notStarted.length, 1)
      assert.include(out.eligible, "p1-v01-r1")
      const rows = trialRows(s.db)
      assert.deepStrictEqual(rows.filter((r) => r.status === "not_started").map((r) => r.trial_id), out.notStarted)
    }), 120_000)
})

describe("assay study status", () => {
  it.live("while a study runs: live per-trial state (running, ended) and pipeline counts; real start and end times", () =>
    Effect.promise(async () => {
      // 12 trials, one at a time; the third one's tasks are held (at the gate) while `status`
      // looks: two trials ended, the third running, on any machine; a stop then drains it
      const s = studyDir({ variants: 12, repeats: 1, cases: 3, ms: 20, concurrency: 1, trialConcurrency: 1, gated: [2] })
      s.hold()
      const run = start(["study", "run", s.file, "-q"], { cwd: s.dir })
      // two trials done (3 cases x 2 tasks each), the third under way
      await s.held(run.child)
      assert.strictEqual(executions(s.log).length, 12)
      const r = await Effect.runPromise(assay(["study", "status", s.file, "--json"], { cwd: s.dir }))
      assert.strictEqual(r.code, 0, r.stderr)
      const out = JSON.parse(r.stdout)
      assert.strictEqual(out.status, "running")
      assert.isTrue(out.running)
      const trials = out.trials as Array<{ trialId: string; state: string; startedAt: number; endedAt: number; pipelines: { ended: number; planned: number | null } }>
      const ended = trials.filter((t) => t.state === "ended")
      assert.isAtLeast(ended.length, 1, JSON.stringify(trials))
      for (const t of ended) {
        assert.strictEqual(t.pipelines.ended, 3)
        assert.strictEqual(t.pipelines.planned, 3, "the plan's pipelines per trial")
        assert.isAbove(t.endedAt, t.startedAt, "real start and end")
      }
      assert.isAtLeast(trials.filter((t) => t.state === "running").length, 1, JSON.stringify(trials))
      assert.isTrue(trials.every((t) => t.state !== "pending" || t.pipelines.ended === 0), JSON.stringify(trials))
      const stop = await Effect.runPromise(assay(["study", "stop", s.file], { cwd: s.dir }))
      assert.strictEqual(stop.code, 0, stop.stderr)
      await s.stopFired(run.child)
      s.release()
      const done = await run.done
      assert.strictEqual(done.code, 0, done.stderr)
      const text = await Effect.runPromise(assay(["study", "status", s.file], { cwd: s.dir }))
      assert.match(text.stdout, /p1-v01-r1\s+succeeded\s+3 of 3 ended, 0 admitted/)
    }), 120_000)

  it("the pipelines admitted and not ended are called admitted, never running (they may wait for a worker slot)", () => {
    // run.concurrency 8, 16 admitted: at most 8 of them run; the store cannot tell which
    assert.strictEqual(StudyRun.progressText({ ended: 4, admitted: 16, pending: 0, planned: 40 }), "4 of 40 ended, 16 admitted")
    assert.strictEqual(StudyRun.progressText({ ended: 4, admitted: 16, pending: 0, planned: null }), "4 ended, 16 admitted")
    assert.strictEqual(StudyRun.progressText({ ended: 0, admitted: 0, pending: 0, planned: 40 }), "-")
    assert.notInclude(StudyRun.progressText({ ended: 0, admitted: 16, pending: 0, planned: 40 }), "running")
  })

  it("a trial's metrics in status say they are partial unless it succeeded or every planned pipeline ended: '0 of 40 ended' never beside a bare accuracy (issue 16 leftovers)", () => {
    const running = { state: "running", metrics: { accuracy: 0.75 }, pipelines: { ended: 0, planned: 40 } }
    assert.deepStrictEqual(StudyRun.metricsCell(running), { partial: true, text: "partial, as last settled: accuracy=0.7500" })
    assert.isTrue(StudyRun.metricsCell({ ...running, state: "incomplete", pipelines: { ended: 12, planned: 40 } }).partial)
    assert.isTrue(StudyRun.metricsCell({ ...running, state: "interrupted", pipelines: { ended: 3, planned: null } }).partial)
    // a result: succeeded, or every planned pipeline ended (failed on a hard constraint, say)
    assert.deepStrictEqual(StudyRun.metricsCell({ ...running, state: "succeeded", pipelines: { ended: 40, planned: 40 } }), { partial: false, text: "accuracy=0.7500" })
    assert.isFalse(StudyRun.metricsCell({ ...running, state: "failed", pipelines: { ended: 40, planned: 40 } }).partial)
    // no metrics: nothing to call partial
    assert.deepStrictEqual(StudyRun.metricsCell({ ...running, metrics: {} }), { partial: false, text: "" })
  })

  it("a trial running again shows its last settlement's metrics as such, never beside the live count they do not cover (issue 16 item 6)", () => {
    // settled incomplete at 12 succeeded, resumed: 20 succeeded now, the metrics still the 12's
    const row = { state: "running", metrics: { accuracy: 0.75 }, pipelines: { ended: 20, planned: 40, succeeded: 20 } }
    assert.deepStrictEqual(StudyRun.metricsCell(row), { partial: true, text: "partial, as last settled: accuracy=0.7500" })
    // every planned pipeline ended, not settled yet: still the last settlement's partial figures
    assert.deepStrictEqual(
      StudyRun.metricsCell({ ...row, state: "ended", pipelines: { ended: 40, planned: 40, succeeded: 40 } }),
      { partial: true, text: "partial, as last settled: accuracy=0.7500" }
    )
    // settled: the live count is the one they cover
    assert.deepStrictEqual(
      StudyRun.metricsCell({ ...row, state: "incomplete", pipelines: { ended: 12, planned: 40, succeeded: 12 } }),
      { partial: true, text: "partial (12 of 40 pipelines): accuracy=0.7500" }
    )
  })

  it("the partial count is the one the settlement stored, not the live one (tester16b: 'partial (n of N)' read live)", () => {
    // settled incomplete at 12 succeeded (stored), resumed: 20 succeeded now
    const row = { state: "running", metrics: { accuracy: 0.75 }, pipelines: { ended: 20, planned: 40, succeeded: 20 }, settled: { metricsOver: { succeeded: 12, planned: 40 } } }
    assert.deepStrictEqual(StudyRun.metricsCell(row), { partial: true, text: "partial, as last settled (12 of 40 pipelines): accuracy=0.7500" })
    // settled again later with more pipelines stored than it covered: the stored count
    assert.deepStrictEqual(
      StudyRun.metricsCell({ ...row, state: "incomplete", pipelines: { ended: 25, planned: 40, succeeded: 25 } }),
      { partial: true, text: "partial (12 of 40 pipelines): accuracy=0.7500" }
    )
  })

  it("metric values print as every study view prints figures: from 10,000 up rounded, never 1.235e+4 (issue 16 item 3)", () => {
    const row = { state: "succeeded", metrics: { wallMs: 12345.678, accuracy: 2 / 3 }, pipelines: { ended: 40, planned: 40 } }
    assert.strictEqual(StudyRun.metricsCell(row).text, "wallMs=12346 accuracy=0.6667")
  })

  it("partial metrics say how many pipelines they cover: the succeeded ones, of the planned (issue 16: 'n of N')", () => {
    const row = { state: "budget_exhausted", metrics: { judgeScore: 1 }, pipelines: { ended: 3, planned: 40, succeeded: 2 } }
    assert.deepStrictEqual(StudyRun.metricsCell(row), { partial: true, text: "partial (2 of 40 pipelines): judgeScore=1" })
    assert.deepStrictEqual(
      StudyRun.metricsCell({ ...row, pipelines: { ended: 1, planned: null, succeeded: 1 } }),
      { partial: true, text: "partial (1 pipeline): judgeScore=1" }
    )
  })
})

describe("StudyRun.resumeCommand (the hint after Ctrl-C)", () => {
  it("repeats the flags the run needs (output root, protocol version, trials, strict env, cache), quoted; not --new-version nor the printing flags", () => {
    const base = { file: "study.yaml", resume: false, newVersion: true, outputRoot: Option.none(), trials: [], strictEnv: false, json: true, quiet: true }
    assert.strictEqual(StudyRun.resumeCommand(base), "assay study resume study.yaml")
    assert.strictEqual(
      StudyRun.resumeCommand({
        ...base,
        file: "my study.yaml",
        outputRoot: Option.some("runs-d"),
        version: Option.some(2),
        trials: ["p2-v01-r1", "p2-v03-r2"],
        strictEnv: true,
        cache: { cache: false, cacheMode: Option.some("readOnly"), cacheDb: Option.some("c.db"), cacheTtl: Option.none() }
      }),
      "assay study resume 'my study.yaml' --output-root runs-d --protocol-version 2 --trial p2-v01-r1 --trial p2-v03-r2 --strict-env --cache-mode readOnly --cache-db c.db"
    )
  })
})

describe("StudyRun.stoppedBySignal (the exit 130 rule)", () => {
  const sigint: StopFired = { condition: { when: "manual", running: "drain" }, reason: "SIGINT received", at: 1, running: "drain", signal: "SIGINT" }
  const report = (over: Partial<Study.StudyReport>) => ({ stop: null, stoppedEarly: false, run: null, ...over }) as unknown as Study.StudyReport
  it("a Ctrl-C that left a trial unfinished is a signal stop; one whose drain let every trial finish stopped nothing", () => {
    assert.isTrue(StudyRun.stoppedBySignal(report({ stop: sigint, stoppedEarly: true })))
    assert.isFalse(StudyRun.stoppedBySignal(report({ stop: sigint, stoppedEarly: false })))
    assert.isFalse(StudyRun.stoppedBySignal(report({ stop: { ...sigint, signal: undefined, reason: "manual stop requested" }, stoppedEarly: true })))
    // a second signal cancelled the run after another stop fired
    const run = { stopReason: "study_stop:sigint" } as unknown as Study.StudyReport["run"]
    assert.isTrue(StudyRun.stoppedBySignal(report({ stop: { ...sigint, signal: undefined }, stoppedEarly: false, run })))
  })
})

describe("assay study: Ctrl-C", () => {
  it.live("SIGINT drains the running study, exits 130 and says how to continue, with no suite line contradicting the study", () =>
    Effect.promise(async () => {
      // 8 trials, one attempt at a time; the tasks are held (at the gate) until the signal's stop
      // has fired: the drain lets the started trials finish, the others never start, on any machine
      const s = studyDir({ variants: 8, repeats: 1, cases: 3, concurrency: 1, trialConcurrency: 1, gated: [0, 1, 2, 3, 4, 5, 6, 7] })
      s.hold()
      const run = start(["study", "run", s.file, "--json", "-q"], { cwd: s.dir })
      await s.held(run.child)
      run.child.kill("SIGINT")
      await s.stopFired(run.child)
      s.release()
      const done = await run.done
      assert.strictEqual(done.code, 130, done.stderr)
      assert.include(done.stderr, `continue with: assay study resume ${s.file}`)
      const out = JSON.parse(done.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.status, "stopped_with_results")
      assert.strictEqual(out.stop.signal, "SIGINT")
      assert.isTrue(out.signalled)
      // the text report has no suite line saying "completed"
      const firstStop = s.stoppedAt()
      s.hold()
      const again = start(["study", "resume", s.file, "-q"], { cwd: s.dir })
      await s.held(again.child)
      again.child.kill("SIGINT")
      await s.stopFired(again.child, firstStop)
      s.release()
      const text = await again.done
      assert.strictEqual(text.code, 130, text.stderr)
      assert.notInclude(text.stdout, ": completed in")
      assert.include(text.stdout, "study kstudy (protocol version 1): stopped with results")
    }), 120_000)
})

describe("assay study: two processes, SIGKILL and resume", () => {
  it.live("9 variants x 3 repeats: the second process is refused; killed and resumed, exactly 27 trials settle, nothing re-executed after its checkpoint", () =>
    Effect.promise(async () => {
      const s = studyDir({ variants: 9, repeats: 3, cases: 4, ms: 20, concurrency: 4, trialConcurrency: 3 })
      const env = (run: number) => ({ STUDY_RUN: String(run) })
      // two processes at once on one study: exactly one runs, the other is refused at once
      const a = start(["study", "run", s.file, "-q"], { cwd: s.dir, env: env(1) })
      const b = start(["study", "run", s.file, "-q"], { cwd: s.dir, env: env(1) })
      const first = await Promise.race([a.done.then(() => "a" as const), b.done.then(() => "b" as const)])
      const [loser, winner] = first === "a" ? [a, b] : [b, a]
      const lost = await loser.done
      assert.strictEqual(lost.code, 75, lost.stderr) // ExitCode.Locked, as for plain runs and suites
      assert.include(lost.stderr, "already running in another process", lost.stderr)
      // kill the winner once some tasks ran
      await waitFor(() => executions(s.log).length >= 20 || winner.child.exitCode !== null, 60_000)
      winner.child.kill("SIGKILL")
      const killed = await winner.done
      assert.strictEqual(killed.signal, "SIGKILL", killed.stderr)
      const committedBefore2 = committedVisits(s.db)
      // status reads the dead process's row as interrupted
      const status = await Effect.runPromise(assay(["study", "status", s.file], { cwd: s.dir }))
      assert.include(status.stdout, "interrupted")
      // per trial: the ones cut by the kill are interrupted, none reads pending with pipelines done
      const killedRows = JSON.parse((await Effect.runPromise(assay(["study", "status", s.file, "--json"], { cwd: s.dir }))).stdout)
      type Row = { trialId: string; state: string; startedAt: number | null; endedAt: number | null; pipelines: { ended: number; running: number } }
      const cut = (killedRows.trials as Array<Row>).filter((t) => t.state === "interrupted")
      assert.isAtLeast(cut.length, 1, JSON.stringify(killedRows.trials))
      assert.isTrue(cut.every((t) => t.startedAt !== null))
      for (const t of killedRows.trials as Array<Row>) {
        if (t.pipelines.ended > 0) assert.notStrictEqual(t.state, "pending", JSON.stringify(t))
        if (t.state === "ended") assert.isAbove(t.endedAt!, t.startedAt!, JSON.stringify(t))
      }
      // kill the second run too, later
      const second = start(["study", "resume", s.file, "-q"], { cwd: s.dir, env: env(2) })
      const before = executions(s.log).length
      await waitFor(() => executions(s.log).length >= before + 20 || second.child.exitCode !== null, 60_000)
      second.child.kill("SIGKILL")
      await second.done
      const committedBefore3 = committedVisits(s.db)
      const last = await Effect.runPromise(assay(["study", "resume", s.file, "--json", "-q"], { cwd: s.dir, env: env(3) }))
      assert.strictEqual(last.code, 0, last.stderr)
      const out = JSON.parse(last.stdout.trim().split("\n").pop()!)
      assert.strictEqual(out.status, "completed")
      assert.strictEqual(out.trials.length, 27)
      const rows = trialRows(s.db)
      assert.strictEqual(rows.length, 27)
      assert.isTrue(rows.every((r) => r.status === "succeeded"), JSON.stringify(rows))
      // no task execution after its checkpoint was committed
      for (const e of executions(s.log)) {
        if (e.run === 2) assert.isFalse(committedBefore2.has(e.key), `run 2 re-ran ${e.key}`)
        if (e.run === 3) assert.isFalse(committedBefore3.has(e.key), `run 3 re-ran ${e.key}`)
      }
      // every (trial, case, task) committed exactly once in the end: 27 x 4 x 2
      assert.strictEqual(committedVisits(s.db).size, 27 * 4 * 2)
    }), 180_000)
})
