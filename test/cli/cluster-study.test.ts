/**
 * Issue 17 §3: a study on the cluster engine, through `bin/assay` on the harness PostgreSQL.
 * A study of 2 variants × 2 repeats (4 trials, 3 pipelines each) whose task holds a lease of
 * the experiment's pool `apis` (capacity 2) and reports a deterministic metric; two `assay
 * runner -c STUDY` processes serve its trials; `assay study run STUDY --engine cluster` drives
 * it from the submitting process:
 *
 * - every pipeline runs once, on the runners (both of them), never more than 2 calls at once
 *   across them, though the first submitter was killed (-9) while they ran and a resume followed
 *   them and admitted the rest;
 * - the trials settle as an embedded run of the same study settles them (same statuses and
 *   metrics, same study status, same `study report` comparison);
 * - `study status --database` shows the trials' pipeline counts from the cluster's store;
 * - resuming runs nothing again; `study report` of the cluster's root needs `--database`; a
 *   root is continued on the engine that ran it only;
 * - `study confirm --engine cluster` runs a confirmation trial on the runners already up (they
 *   read the trials recorded in the cluster's database when asked for a pipeline they do not
 *   know);
 * - what the cluster engine does not carry out is refused (exit 2, naming it): the call cache
 *   flags, `--database` without `--engine cluster`; `run -c STUDY --engine cluster`
 *   points to `study run`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, logLines, root, start, tempDir, untilReal as until, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** The task: holds a lease of `apis` for `ms`, logging start and end; reports `accuracy`. */
const tasks = (log: string) =>
  [
    `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
    `import * as fs from "node:fs"`,
    `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
    `export const work = (k: number, ms: number) =>`,
    `  Task.make("work", { parameters: { k, ms } }, (n: number, ctx) => Effect.scoped(Effect.gen(function*() {`,
    `    const lease = yield* ctx.acquire()`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["start", Date.now(), ctx.experimentId, n, lease.pool, process.pid].join(" ") + "\\n")`,
    `    yield* Effect.sleep(ms)`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["end", Date.now(), ctx.experimentId, n, lease.pool, process.pid].join(" ") + "\\n")`,
    `    yield* ctx.reportMetric("accuracy", k === 0 ? 0.9 - n / 100 : 0.7 + n / 100)`,
    `    return { n, k }`,
    `  })))`
  ].join("\n")

/** The log's lines: `[kind, ts, trial, n, pool, pid]`. */
const events = logLines

/** The most calls in flight at once (an end before a start at the same millisecond). */
const peak = (log: string) => {
  const sorted = events(log).sort((x, y) => Number(x[1]) - Number(y[1]) || (x[0] === "end" ? -1 : 1))
  let now = 0
  let most = 0
  for (const [kind] of sorted) {
    now += kind === "start" ? 1 : -1
    most = Math.max(most, now)
  }
  return most
}

interface Ran {
  readonly status: string
  readonly trials: ReadonlyArray<{ readonly trialId: string; readonly status: string; readonly metrics: Record<string, number> | null }>
}

/** What both engines must agree on: the study's status, each trial's status and metrics. */
const settled = (r: Ran) => ({
  status: r.status,
  trials: r.trials.map((t) => [t.trialId, t.status, t.metrics]).sort((a, b) => String(a[0]).localeCompare(String(b[0])))
})

describe("a study on --engine cluster", () => {
  it.scopedLive("two runners serve the trials; settles as embedded; resume runs nothing; refusals", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-study")
      const log = path.join(dir, "calls.log")
      write(dir, "package.json", { type: "module" })
      write(dir, "tasks.ts", tasks(log))
      write(dir, "experiment.json", {
        pools: { apis: { resources: [{ id: "k", capacity: 2 }] } },
        pipeline: { name: "cases", tasks: [{ use: "./tasks.ts#work", args: [{ $var: "k" }, 300], resource: "apis" }] },
        source: { range: { n: 3 } }
      })
      const studyOf = (extra: Record<string, unknown> = {}) => ({
        study: { id: "cstudy", question: "which k?", type: "compare" },
        protocol: { experiment: "./experiment.json" },
        output: { root: "out" },
        run: { trialConcurrency: 2 },
        variables: [{ name: "k", type: "enum", values: [0, 1] }],
        baseline: { k: 0 },
        repeats: 2,
        stop: [{ when: "allTrialsTerminal" }],
        objectives: [{ metric: "accuracy", direction: "maximize" }],
        ...extra
      })
      const study = write(dir, "study.json", studyOf())
      yield* Effect.promise(() => pg.createDatabase("study"))
      const url = pg.url("study")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)

      // refused before anything runs: a flag of the cluster engine without it, the cache flags
      const noEngine = yield* assay(["study", "run", study, "--database", url, "--output-root", path.join(dir, "x")])
      assert.strictEqual(noEngine.code, 2, noEngine.stderr)
      assert.include(noEngine.stderr, "--database")
      const cache = yield* assay(["study", "run", study, "--engine", "cluster", "--database", url, "--cache", "--output-root", path.join(dir, "x")])
      assert.strictEqual(cache.code, 2, cache.stderr)
      assert.include(cache.stderr, "--cache")
      const viaRun = yield* assay(["run", "-c", study, "--engine", "cluster", "--database", url])
      assert.strictEqual(viaRun.code, 2, viaRun.stderr)
      assert.include(viaRun.stderr, "assay study run")
      assert.isFalse(fs.existsSync(path.join(dir, "x")), "the refused runs wrote no root")

      const runners = yield* Effect.forEach([0, 1], () =>
        Effect.map(Effect.promise(freePort), (port) =>
          start(["runner", "-c", study, "--database", url, "--listen", `127.0.0.1:${port}`, "--lease-ttl", "5 seconds"])))
      yield* Effect.addFinalizer(() => Effect.sync(() => runners.forEach((r) => r.child.kill("SIGKILL"))))
      const logs = () => runners.map((r) => r.stderr()).join("\n")
      const up = yield* until(() => pg.psql("study", "SELECT count(*) FROM cluster_runners").trim() === "2", 90_000)
      assert.isTrue(up, logs())

      // the submitter killed (-9) once pipelines run: the admitted ones go on on the runners, and
      // resuming follows them and admits the rest
      const clusterRoot = path.join(dir, "out-cluster")
      const killed = start(["study", "run", study, "--engine", "cluster", "--database", url, "--output-root", clusterRoot, "--max-admitted", "4", "--quiet"])
      const begun = yield* until(() => events(log).length >= 1 || killed.child.exitCode !== null, 60_000)
      killed.child.kill("SIGKILL")
      yield* Effect.promise(() => killed.done)
      assert.isTrue(begun && events(log).filter((e) => e[0] === "start").length < 12, killed.stderr() + fs.readFileSync(log, "utf8"))
      const sub = yield* assay([
        "study", "resume", study, "--engine", "cluster", "--database", url, "--output-root", clusterRoot, "--max-admitted", "4", "--json", "--quiet"
      ])
      assert.strictEqual(sub.code, 0, sub.stdout + sub.stderr + logs())
      const onCluster = JSON.parse(sub.stdout) as Ran
      const starts = events(log).filter((e) => e[0] === "start")
      // each of the 12 pipelines ran once, on the runners, under the experiment's pool
      assert.strictEqual(starts.length, 12, fs.readFileSync(log, "utf8"))
      assert.strictEqual(new Set(starts.map((e) => `${e[2]}/${e[3]}`)).size, 12)
      assert.deepStrictEqual([...new Set(starts.map((e) => e[4]))], ["apis"])
      assert.isAtMost(peak(log), 2, fs.readFileSync(log, "utf8"))
      assert.strictEqual(new Set(starts.map((e) => e[5])).size, 2, "both runners ran pipelines")
      assert.strictEqual(
        pg.psql("study", "SELECT count(*) FROM assay_pipelines WHERE suite_id = 'cstudy' AND state = 'succeeded'").trim(),
        "12"
      )

      // the same study on the embedded engine settles the same way
      fs.rmSync(log)
      const embeddedRoot = path.join(dir, "out-embedded")
      const emb = yield* assay(["study", "run", study, "--output-root", embeddedRoot, "--json", "--quiet"])
      assert.strictEqual(emb.code, 0, emb.stdout + emb.stderr)
      const embedded = JSON.parse(emb.stdout) as Ran
      assert.deepStrictEqual(settled(onCluster), settled(embedded))
      assert.strictEqual(onCluster.status, "completed")
      assert.strictEqual(onCluster.trials.length, 4)
      // the comparison `study report` makes from each root
      const reportOf = (out: string, extra: ReadonlyArray<string>) =>
        Effect.map(assay(["study", "report", study, "--output-root", out, "--format", "json", ...extra]), (r) => {
          assert.strictEqual(r.code, 0, r.stderr)
          // the objective's metric (accuracy, deterministic), not the built-in latency figures
          const c = JSON.parse(r.stdout) as {
            run: { status: string; trialsByStatus: unknown }
            variants: ReadonlyArray<{ variantId: string; succeeded: number; failed: number; values: Record<string, unknown>; vsBaseline: Record<string, unknown> }>
            weightedRanking: unknown
            conclusion: { status: string; candidates: unknown; pointEstimateFront: unknown }
          }
          return {
            run: [c.run.status, c.run.trialsByStatus],
            variants: c.variants.map((v) => [v.variantId, v.succeeded, v.failed, v.values.accuracy, v.vsBaseline.accuracy]),
            ranking: c.weightedRanking,
            conclusion: [c.conclusion.status, c.conclusion.candidates, c.conclusion.pointEstimateFront]
          }
        })
      const clusterReport = yield* reportOf(clusterRoot, ["--database", url])
      const embeddedReport = yield* reportOf(embeddedRoot, [])
      assert.deepStrictEqual(clusterReport, embeddedReport)
      // `study status --database` reads the trials' pipeline counts in the cluster's store
      // (without it, a cluster root shows the trials' settled state, its own tables being empty)
      const statusOf = (extra: ReadonlyArray<string>) =>
        Effect.map(assay(["study", "status", study, "--output-root", clusterRoot, "--json", ...extra]), (r) => {
          assert.strictEqual(r.code, 0, r.stderr)
          return (JSON.parse(r.stdout) as { trials: ReadonlyArray<{ status: string; pipelines: { ended: number; succeeded: number } }> }).trials
        })
      const live = yield* statusOf(["--database", url])
      assert.deepStrictEqual(live.map((t) => [t.status, t.pipelines.ended, t.pipelines.succeeded]), Array(4).fill(["succeeded", 3, 3]))
      const settledOnly = yield* statusOf([])
      assert.deepStrictEqual(settledOnly.map((t) => [t.status, t.pipelines.ended]), Array(4).fill(["succeeded", 0]))
      // the cluster's root keeps its pipelines in Postgres: the report needs the database
      const noDb = yield* assay(["study", "report", study, "--output-root", clusterRoot])
      assert.strictEqual(noDb.code, 2, noDb.stderr)
      assert.include(noDb.stderr, "--database")

      // resuming on the cluster runs nothing again
      fs.rmSync(log)
      const again = yield* assay(["study", "resume", study, "--engine", "cluster", "--database", url, "--output-root", clusterRoot, "--json", "--quiet"])
      assert.strictEqual(again.code, 0, again.stdout + again.stderr)
      assert.deepStrictEqual(settled(JSON.parse(again.stdout) as Ran), settled(onCluster))
      assert.deepStrictEqual(events(log), [], "nothing ran again")
      // one engine per root: the other one is refused (exit 2, --engine)
      const embeddedOnCluster = yield* assay(["study", "resume", study, "--output-root", clusterRoot, "--quiet"])
      assert.strictEqual(embeddedOnCluster.code, 2, embeddedOnCluster.stderr)
      assert.include(embeddedOnCluster.stderr, "ran on the cluster engine")
      const clusterOnEmbedded = yield* assay(["study", "resume", study, "--engine", "cluster", "--database", url, "--output-root", embeddedRoot, "--quiet"])
      assert.strictEqual(clusterOnEmbedded.code, 2, clusterOnEmbedded.stderr)
      assert.include(clusterOnEmbedded.stderr, "ran on the embedded engine")
      assert.deepStrictEqual(events(log), [], "nothing ran")

      // a confirmation trial on the cluster: recorded in the cluster's database, and the
      // runners (started before it) serve it once asked for a pipeline they did not know
      const confirmed = yield* assay([
        "study", "confirm", study, "v02", "--repeats", "1", "--engine", "cluster", "--database", url, "--output-root", clusterRoot, "--json", "--quiet"
      ])
      assert.strictEqual(confirmed.code, 0, confirmed.stdout + confirmed.stderr + logs())
      const withConfirmation = JSON.parse(confirmed.stdout) as Ran
      assert.strictEqual(withConfirmation.trials.find((t) => t.trialId === "p1-v02-r3")?.status, "succeeded", confirmed.stdout)
      const confirmStarts = events(log).filter((e) => e[0] === "start")
      assert.deepStrictEqual(confirmStarts.map((e) => `${e[2]}/${e[3]}`).sort(), ["p1-v02-r3/0", "p1-v02-r3/1", "p1-v02-r3/2"])
      const runnerPids = new Set(starts.map((e) => e[5]))
      assert.isTrue(confirmStarts.every((e) => runnerPids.has(e[5])), "ran on the runners that ran the study")
      assert.deepStrictEqual(
        JSON.parse(pg.psql("study", "SELECT value FROM assay_meta WHERE key = 'study/cstudy/trials'").trim()),
        [{ variantId: "v02", repeat: 3 }]
      )
    }), 420_000)
})
