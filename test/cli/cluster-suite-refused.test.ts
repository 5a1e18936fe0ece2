/**
 * Issue 17 (fix17ai's "Left"): `assay run -c SUITE --engine cluster` when the runners refuse
 * some of the suite's pipelines, through `bin/assay` on the harness PostgreSQL. The runner
 * serves a suite file with member `a` only; the submitter's file has members `a` and `c`: the
 * runner refuses `c`'s pipelines. The submitter prints its summary as the single-experiment
 * path does (the run's line, the suite's line and one line per member, the refused pipelines
 * counted `interrupted` in their member's line), then the runners' reason, exit 2.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as path from "node:path"
import { assay, root, start, tempDir, untilReal as until, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

const tasks = [
  `import { Effect } from ${JSON.stringify(path.join(root, "node_modules/effect/dist/esm/index.js"))}`,
  `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
  `export const double = Task.make("double", (n: number) => Effect.succeed(n * 2))`
].join("\n")

describe("a suite on --engine cluster whose pipelines the runners refuse", () => {
  it.scopedLive("the summary is printed (refused pipelines interrupted, per member), then the refusal: exit 2", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-suite-refused")
      write(dir, "lib/package.json", { type: "module" })
      write(dir, "lib/tasks.ts", tasks)
      const member = (rows: string) => ({
        pipeline: { name: "m", tasks: [{ use: "../lib/tasks.ts#double" }] },
        source: { jsonl: { path: write(dir, rows, "0\n1\n") } }
      })
      write(dir, "members/a.json", member("rows-a.jsonl"))
      write(dir, "members/c.json", member("rows-c.jsonl"))
      const suiteOf = (ids: ReadonlyArray<string>) => ({
        suite: { id: "cmp" },
        output: { root: "out/cmp" },
        experiments: Object.fromEntries(ids.map((id) => [id, { config: `members/${id}.json` }]))
      })
      const served = write(dir, "served.json", suiteOf(["a"]))
      const submitted = write(dir, "suite.json", suiteOf(["a", "c"]))
      yield* Effect.promise(() => pg.createDatabase("suite_refused"))
      const url = pg.url("suite_refused")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const port = yield* Effect.promise(freePort)
      const runner = start(["runner", "-c", served, "--database", url, "--listen", `127.0.0.1:${port}`])
      yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
      const up = yield* until(() => pg.psql("suite_refused", "SELECT count(*) FROM cluster_runners").trim() === "1", 90_000)
      assert.isTrue(up, runner.stderr())

      const sub = yield* assay(["run", "-c", submitted, "--engine", "cluster", "--database", url, "--quiet", "--max-admitted", "4"])
      const out = sub.stdout + sub.stderr + runner.stderr()
      assert.strictEqual(sub.code, 2, out)
      // the summary first: the run's line, the suite's, one per member; c's pipelines interrupted (refused)
      const run = /cluster run \S+: (\d+) succeeded, 0 failed, (\d+) interrupted \((\d+) refused by the runners\), 0 already done/.exec(sub.stdout)
      assert.isNotNull(run, out)
      const [succeeded, interrupted, refused] = run!.slice(1).map(Number) as [number, number, number]
      assert.isAtLeast(interrupted, 1, out)
      assert.strictEqual(refused, interrupted, out)
      assert.match(sub.stdout, /\nsuite cmp: submitted \d+ · succeeded \d+ · failed 0 · interrupted \d+ \(refused by the runners\) · already done 0/, out)
      const c = /\n {2}c: submitted \d+ · succeeded 0 · failed 0 · interrupted (\d+) \(refused by the runners\) · already done 0/.exec(sub.stdout)
      assert.isNotNull(c, out)
      assert.strictEqual(Number(c![1]), interrupted, out)
      const a = /\n {2}a: submitted \d+ · succeeded (\d+) · failed 0 · already done 0/.exec(sub.stdout)
      assert.isNotNull(a, out)
      assert.strictEqual(Number(a![1]), succeeded, out)
      // then the runners' reason
      assert.include(sub.stderr, "refused by the runners", out)
      assert.include(sub.stderr, "not among the pipelines this runner serves", out)
      // the members' outcomes are recorded under the run (the report reads them)
      assert.strictEqual(
        pg.psql("suite_refused", "SELECT count(*) FROM assay_meta WHERE key LIKE 'suite/cmp/run/%'").trim(),
        "2",
        out
      )

      // --summary json: the member's byState counts them interrupted, the cluster's refused
      const json = yield* assay(["run", "-c", submitted, "--engine", "cluster", "--database", url, "--quiet", "--summary", "json"])
      assert.strictEqual(json.code, 2, json.stdout + json.stderr)
      const doc = JSON.parse(json.stdout.trim().split("\n")[0]!) as {
        cluster: { refused: number }
        members: ReadonlyArray<{ experimentId: string; byState: { interrupted: number } | null }>
      }
      const cOf = doc.members.find((m) => m.experimentId === "c")!
      assert.isAtLeast(cOf.byState!.interrupted, 1, json.stdout)
      assert.strictEqual(doc.cluster.refused, cOf.byState!.interrupted, json.stdout)
    }), 180_000)
})
