/**
 * Issue 17 §3: a suite on the cluster engine, through `bin/assay` on the harness PostgreSQL.
 * Two members (`a`, `b`) bind their local pool `apis` to the suite's one `shared` pool of
 * capacity 2; two `assay runner -c SUITE` processes serve both members; one submitter:
 *
 * - every pipeline of both members runs once, under the shared pool (the lease names the
 *   actual pool: the member's alias is applied on the runner), and the calls in flight never
 *   exceed the capacity across the two runners (the tasks log their start and end);
 * - the summary has one line per member; `assay report URL` shows the suite's members, and
 *   `assay export URL --experiment a` and `assay watch URL --experiment b` one member's rows;
 * - the suite's `run.concurrency` (1) is each runner's attempts at once (they say so, and
 *   neither runs two calls at once);
 * - submitting again is a no-op resume; `--experiment a` selects one member;
 * - a member whose definition changed since the store registered it is refused (exit 2), as
 *   are input rows edited since they ran, a setting the cluster engine does not carry out yet
 *   (a suite-wide `run.journal`) and a flag that does not apply (`--output-root`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, logLines, root, start, tempDir, untilReal as until, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** The members' task: holds a lease of its pool `apis` for `ms`, logging start and end. */
const tasks = (log: string) =>
  [
    `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
    `import * as fs from "node:fs"`,
    `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
    `export const held = (ms: number) =>`,
    `  Task.make("work", { parameters: { ms } }, (n: number, ctx) => Effect.scoped(Effect.gen(function*() {`,
    `    const lease = yield* ctx.acquire()`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["start", Date.now(), ctx.experimentId, n, lease.pool, process.pid].join(" ") + "\\n")`,
    `    yield* Effect.sleep(ms)`,
    `    fs.appendFileSync(${JSON.stringify(log)}, ["end", Date.now(), ctx.experimentId, n, lease.pool, process.pid].join(" ") + "\\n")`,
    `    return n * 2`,
    `  })))`
  ].join("\n")

const member = (ms: number, rows: string) => ({
  pools: { apis: { resources: [{ id: "k", capacity: 8 }] } },
  pipeline: { name: "m", tasks: [{ use: "../lib/tasks.ts#held", args: [ms], resource: "apis" }] },
  source: { jsonl: { path: rows } }
})

/** The log's lines: `[kind, ts, member, n, pool, pid]`. */
const events = logLines

/** The most calls in flight at once (an end before a start at the same millisecond). */
const peak = (log: string, pid?: string) => {
  const sorted = events(log).filter((e) => pid === undefined || e[5] === pid).sort((x, y) => Number(x[1]) - Number(y[1]) || (x[0] === "end" ? -1 : 1))
  let now = 0
  let most = 0
  for (const [kind] of sorted) {
    now += kind === "start" ? 1 : -1
    most = Math.max(most, now)
  }
  return most
}

describe("a suite on --engine cluster", () => {
  it.scopedLive("two runners serve both members under the shared pool; resume, selection and refusals", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-suite")
      const log = path.join(dir, "calls.log")
      write(dir, "lib/package.json", { type: "module" })
      write(dir, "lib/tasks.ts", tasks(log))
      const rows = { a: write(dir, "rows-a.jsonl", "0\n1\n2\n3\n"), b: write(dir, "rows-b.jsonl", "0\n1\n2\n3\n") }
      write(dir, "members/a.json", member(150, rows.a))
      write(dir, "members/b.json", member(150, rows.b))
      const suiteOf = (extra: Record<string, unknown> = {}) => ({
        suite: { id: "cmp" },
        output: { root: "out/cmp" },
        // each runner's attempts at once (no --concurrency given to them)
        run: { concurrency: 1 },
        pools: { shared: { resources: [{ id: "s", capacity: 2 }] } },
        experiments: {
          a: { config: "members/a.json", poolBindings: { apis: "shared" }, label: "A", ...extra },
          b: { config: "members/b.json", poolBindings: { apis: "shared" } }
        }
      })
      const suite = write(dir, "suite.json", suiteOf())
      yield* Effect.promise(() => pg.createDatabase("suite"))
      const url = pg.url("suite")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const runners = yield* Effect.forEach([0, 1], () =>
        Effect.map(Effect.promise(freePort), (port) =>
          start(["runner", "-c", suite, "--database", url, "--listen", `127.0.0.1:${port}`, "--lease-ttl", "5 seconds"])))
      yield* Effect.addFinalizer(() => Effect.sync(() => runners.forEach((r) => r.child.kill("SIGKILL"))))
      const logs = () => runners.map((r) => r.stderr()).join("\n")

      // both runners registered before the submission, so that the windows spread over them
      const up = yield* until(() => pg.psql("suite", "SELECT count(*) FROM cluster_runners").trim() === "2", 90_000)
      assert.isTrue(up, logs())
      // and both holding shards (their advisory locks, each runner on its own session): a runner
      // registered but still waiting for the shards the first one gives up gets no window, and
      // on a loaded machine that took long enough for every window to land on the first one
      const holders = () =>
        pg.psql(
          "suite",
          "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = 'suite')"
        ).trim()
      const sharded = yield* until(() => holders() === "2", 90_000)
      assert.isTrue(sharded, `advisory lock holders: ${holders()}; ${logs()}`)
      const sub = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--quiet", "--max-admitted", "4"])
      assert.strictEqual(sub.code, 0, sub.stdout + sub.stderr + logs())
      assert.match(sub.stdout, /8 succeeded, 0 failed, 0 already done/)
      assert.match(sub.stdout, /suite cmp: submitted 8 · succeeded 8 · failed 0 · already done 0/)
      assert.match(sub.stdout, /\n {2}a \(A\): submitted 4 · succeeded 4 · failed 0 · already done 0 · source exhausted/)
      assert.match(sub.stdout, /\n {2}b: submitted 4 · succeeded 4 · failed 0 · already done 0 · source exhausted/)
      const starts = events(log).filter((e) => e[0] === "start")
      // each pipeline ran once, each under the suite's shared pool
      assert.deepStrictEqual(starts.map((e) => `${e[2]}/${e[3]}`).sort(), ["a/0", "a/1", "a/2", "a/3", "b/0", "b/1", "b/2", "b/3"])
      assert.deepStrictEqual([...new Set(starts.map((e) => e[4]))], ["shared"])
      assert.isAtMost(peak(log), 2, fs.readFileSync(log, "utf8"))
      // the windows (one pipeline each: a quarter of --max-admitted) ran on both runners
      const pids = [...new Set(starts.map((e) => e[5]!))]
      assert.strictEqual(pids.length, 2, fs.readFileSync(log, "utf8"))
      // run.concurrency 1: one attempt at a time in each runner
      for (const pid of pids) assert.strictEqual(peak(log, pid), 1, fs.readFileSync(log, "utf8"))
      for (const r of runners) assert.include(r.stderr(), "1 attempt(s) at once in this process (run.concurrency)")
      // the rows carry their member; the run record its suite
      assert.strictEqual(
        pg.psql("suite", "SELECT experiment_id || ':' || count(*) FROM assay_pipelines WHERE suite_id = 'cmp' GROUP BY experiment_id ORDER BY 1")
          .trim(),
        "a:4\nb:4"
      )
      assert.include(pg.psql("suite", "SELECT meta FROM assay_runs"), `"suite":{"id":"cmp","members":["a","b"]}`)

      // the store's report shows the suite's members
      const report = yield* assay(["report", url])
      assert.strictEqual(report.code, 0, report.stderr)
      assert.match(report.stdout, /suite cmp \(/)
      assert.match(report.stdout, /\n {2}a \(A\): succeeded 4 · latest run: submitted 4 · succeeded 4/)

      // one member's rows alone (export, watch and serve take --experiment on a Postgres store)
      const exported = yield* assay(["export", url, "-", "--format", "jsonl", "--rows", "results", "--experiment", "a"])
      assert.strictEqual(exported.code, 0, exported.stderr)
      const results = exported.stdout.trim().split("\n").map((l) => JSON.parse(l) as { experimentId: string | null })
      assert.deepStrictEqual(results.map((r) => r.experimentId), ["a", "a", "a", "a"])
      const watched = yield* assay(["watch", url, "--experiment", "b", "--interval", "1"])
      assert.strictEqual(watched.code, 0, watched.stderr)
      assert.include(watched.stdout, "pipelines 4: 4 succeeded", "b's 4 of the store's 8")
      assert.include(watched.stdout, "tasks 4 · attempts 4")
      const nobody = yield* assay(["export", url, "-", "--format", "jsonl", "--experiment", "nobody"])
      assert.strictEqual(nobody.code, 2, nobody.stderr)
      assert.include(nobody.stderr, `no suite member "nobody" (members: cmp/a, cmp/b)`)

      // submitting again runs nothing; --experiment selects one member
      const again = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--quiet", "--experiment", "a"])
      assert.strictEqual(again.code, 0, again.stderr)
      assert.match(again.stdout, /0 succeeded, 0 failed, 4 already done/)
      assert.match(again.stdout, /\n {2}a \(A\): submitted 4 · succeeded 0 · failed 0 · already done 4/)
      assert.match(again.stdout, /\n {2}b: not selected/)
      assert.strictEqual(events(log).filter((e) => e[0] === "start").length, 8, "nothing ran again")
      // --summary json: the embedded suite's fields that exist on the cluster
      const json = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--quiet", "--summary", "json", "--experiment", "a"])
      assert.strictEqual(json.code, 0, json.stderr)
      const summary = JSON.parse(json.stdout) as {
        engine: string
        status: string
        skipped: number
        suiteId: string
        members: Array<{ experimentId: string; selected: boolean; skipped: number; failuresReached: boolean }>
      }
      assert.deepStrictEqual([summary.engine, summary.status, summary.skipped, summary.suiteId], ["cluster", "completed", 4, "cmp"])
      assert.deepStrictEqual(
        summary.members.map((m) => [m.experimentId, m.selected, m.skipped, m.failuresReached]),
        [["a", true, 4, false], ["b", false, 0, false]]
      )

      // refused: a flag that does not apply, a setting not carried out yet, a changed definition
      const root = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url, "--output-root", dir])
      assert.strictEqual(root.code, 2, root.stderr)
      assert.include(root.stderr, "--output-root")
      write(dir, "budget.json", { ...suiteOf(), run: { journal: "summary" } })
      const budget = yield* assay(["run", "-c", path.join(dir, "budget.json"), "--engine", "cluster", "--database", url])
      assert.strictEqual(budget.code, 2, budget.stderr)
      assert.include(budget.stderr, "run.journal")
      assert.include(budget.stderr, "not supported on the cluster engine yet")
      // a row edited since it ran (the definition holds): refused, nothing admitted
      write(dir, "rows-a.jsonl", "0\n1\n2\n5\n")
      const edited = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url])
      assert.strictEqual(edited.code, 2, edited.stderr)
      assert.include(edited.stderr, "experiments.a")
      assert.include(edited.stderr, "input rows were edited or removed since they ran")
      write(dir, "rows-a.jsonl", "0\n1\n2\n3\n")
      write(dir, "members/b.json", member(10, rows.b))
      const changed = yield* assay(["run", "-c", suite, "--engine", "cluster", "--database", url])
      assert.strictEqual(changed.code, 2, changed.stderr)
      assert.include(changed.stderr, `the definition of member "b" changed`)
      assert.strictEqual(pg.psql("suite", "SELECT count(*) FROM assay_runs").trim(), "3", "the refused runs opened no run (3: the first, the resume and the JSON one)")
    }), 240_000)
})
