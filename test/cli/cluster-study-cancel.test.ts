/**
 * Issue 17 §3: `assay study stop --cancel` on a study run by the cluster engine, end to end
 * through `bin/assay` with two real `assay runner` processes on the harness PostgreSQL (the
 * in-process tests drive the same marks in memory: ClusterEngine.studyRunner / .cancel).
 *
 * A study of one trial of 2 pipelines × 3 steps; step 2 holds until the test lets it go, so the
 * cancel lands while both pipelines are inside it:
 * - the submitter marks the run cancelled in the store's `assay_meta` (`cancel/<runId>`), the
 *   runners read it (`ASSAY_RUNNER_CANCEL_EVERY`), the step under way finishes and commits, and
 *   step 3 never starts: both rows end `interrupted` after 2 tasks, the trial `cancelled`;
 * - `study resume --engine cluster` runs step 3 alone (steps 1 and 2 are not called again) and
 *   the study completes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, logLines, root, start, tempDir, untilReal as until, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** The step task: logs its start and end; step 2 waits for the `go` file before it ends. */
const tasks = (log: string, go: string) =>
  [
    `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
    `import * as fs from "node:fs"`,
    `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
    `export const step = (k: number) =>`,
    `  Task.make("step" + k, { parameters: { k } }, (n: number, ctx) => Effect.gen(function*() {`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["start", "step" + k, n, process.pid].join(" ") + "\\n")`,
    `    if (k === 2) while (!fs.existsSync(${JSON.stringify(go)})) yield* Effect.sleep(50)`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["end", "step" + k, n, process.pid].join(" ") + "\\n")`,
    `    yield* ctx.reportMetric("accuracy", 0.9)`,
    `    return n`,
    `  }))`
  ].join("\n")

/** The log's lines: `[kind, task, n, pid]`. */
const events = logLines

describe("a study on --engine cluster: study stop --cancel", () => {
  it.scopedLive("the runners stop the running pipelines at their next task boundary; a resume runs only the rest", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-study-cancel")
      const log = path.join(dir, "calls.log")
      const go = path.join(dir, "go")
      write(dir, "package.json", { type: "module" })
      write(dir, "tasks.ts", tasks(log, go))
      write(dir, "experiment.json", {
        pipeline: {
          name: "steps",
          tasks: [1, 2, 3].map((k) => ({ use: "./tasks.ts#step", args: [k] }))
        },
        source: { range: { n: 2 } }
      })
      const study = write(dir, "study.json", {
        study: { id: "cancelst", question: "does a cancel stop the runners?", type: "compare" },
        protocol: { experiment: "./experiment.json" },
        output: { root: "out" },
        variables: [{ name: "v", type: "enum", values: [0] }],
        baseline: { v: 0 },
        repeats: 1,
        stop: [{ when: "allTrialsTerminal" }],
        objectives: [{ metric: "accuracy", direction: "maximize" }]
      })
      yield* Effect.promise(() => pg.createDatabase("cancelst"))
      const url = pg.url("cancelst")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)

      const runners = yield* Effect.forEach([0, 1], () =>
        Effect.map(Effect.promise(freePort), (port) =>
          start(["runner", "-c", study, "--database", url, "--listen", `127.0.0.1:${port}`], {
            env: { ASSAY_RUNNER_CANCEL_EVERY: "300 millis" }
          })))
      yield* Effect.addFinalizer(() => Effect.sync(() => runners.forEach((r) => r.child.kill("SIGKILL"))))
      const logs = () => runners.map((r) => r.stderr()).join("\n")
      const up = yield* until(() => pg.psql("cancelst", "SELECT count(*) FROM cluster_runners").trim() === "2", 90_000)
      assert.isTrue(up, logs())

      const root = path.join(dir, "out-cluster")
      const running = start(["study", "run", study, "--engine", "cluster", "--database", url, "--output-root", root, "--json", "--quiet"])
      const inStep2 = () => events(log).filter((e) => e[0] === "start" && e[1] === "step2").length === 2
      assert.isTrue(yield* until(() => inStep2() || running.child.exitCode !== null, 120_000), running.stderr() + logs())
      assert.isTrue(inStep2(), running.stderr())

      const stop = yield* assay(["study", "stop", study, "--output-root", root, "--cancel"])
      assert.strictEqual(stop.code, 0, stop.stdout + stop.stderr)
      const marked = () => pg.psql("cancelst", "SELECT count(*) FROM assay_meta WHERE key LIKE 'cancel/%'").trim() !== "0"
      assert.isTrue(yield* until(marked, 60_000), running.stderr() + logs())
      // the runners read the marks every 300 ms: give them many reads before step 2 may end
      yield* Effect.sleep("3 seconds")
      fs.writeFileSync(go, "")
      yield* Effect.promise(() => running.done)
      const first = JSON.parse(running.stdout()) as { status: string; trials: ReadonlyArray<{ status: string }> }
      assert.deepStrictEqual(first.trials.map((t) => t.status), ["cancelled"], running.stdout() + running.stderr())
      // the step under way finished and committed; step 3 never started
      assert.strictEqual(events(log).filter((e) => e[0] === "end" && e[1] === "step2").length, 2, fs.readFileSync(log, "utf8"))
      assert.isFalse(events(log).some((e) => e[1] === "step3"), fs.readFileSync(log, "utf8"))
      assert.strictEqual(
        pg.psql("cancelst", "SELECT string_agg(state || ':' || n_tasks_done, ',') FROM assay_pipelines WHERE suite_id = 'cancelst'").trim(),
        "interrupted:2,interrupted:2"
      )

      // resuming runs step 3 alone, on the runners, and completes the study
      fs.rmSync(log)
      const resumed = yield* assay(["study", "resume", study, "--engine", "cluster", "--database", url, "--output-root", root, "--json", "--quiet"])
      assert.strictEqual(resumed.code, 0, resumed.stdout + resumed.stderr + logs())
      const again = JSON.parse(resumed.stdout) as { status: string; trials: ReadonlyArray<{ status: string }> }
      assert.deepStrictEqual([again.status, again.trials.map((t) => t.status)], ["completed", ["succeeded"]], resumed.stdout)
      assert.deepStrictEqual(
        events(log).filter((e) => e[0] === "start").map((e) => `${e[1]}/${e[2]}`).sort(),
        ["step3/0", "step3/1"],
        fs.readFileSync(log, "utf8")
      )
    }), 420_000)
})
