/**
 * `assay report|export|serve ROOT` on a real suite root, as a user runs them: spawned `bin/assay`
 * processes. The root is made by `assay run -c SUITE` then `assay resume -c SUITE`: members `a`
 * (label A, pool `apis` bound to the shared pool) and `b` (its own `apis`, private), 4 rows each;
 * in the first run `a`'s row 1 fails (a flag file is present), the resume runs it again
 * successfully and skips everything else.
 *
 * Covered: report's cumulative default, `--experiment`, `--run-id` (the failure of run 1 stays
 * failed after run 2 succeeded; run 2 counts its skips), unknown member / run and `--experiment`
 * on an ordinary store (exit 2); export `results` rows (suite, member, local key, repeat), audit
 * rows with member identity, `--by-experiment` files and order (both layouts); serve
 * `/experiments`, `?experiment=` with `run_id`, the dashboard's member links (127.0.0.1).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { assay as run, type Ran, root as repo, start, write } from "../support/cli.js"

/** `bin/assay args`; one that hangs is killed after 90 s (the test fails instead of outliving it). */
const assay = (args: ReadonlyArray<string>) => run(args, { killAfterMs: 90_000 })

/** Writes the suite dir, runs it (a's row 1 fails), then resumes it (row 1 succeeds). */
const makeRoot = (layout: "combined" | "byExperiment") =>
  Effect.gen(function*() {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "assay-suite-views-"))
    const flag = path.join(dir, "fail-now")
    write(dir, "lib/tasks.mts", [
      `import * as fs from "node:fs"`,
      `import * as Task from ${JSON.stringify(path.join(repo, "src/domain/Task.ts"))}`,
      `export const work = (flag: string, failOn: number) =>`,
      `  Task.promise("work", { parameters: { failOn } }, async (n: number) => {`,
      `    if (n === failOn && fs.existsSync(flag)) throw Object.assign(new Error("row " + n + " is bad"), { errorClass: "fatal" })`,
      `    return n * 2`,
      `  })`
    ].join("\n"))
    const member = (failOn: number) => ({
      run: { concurrency: 1 },
      pools: { apis: { resources: [{ id: "k", capacity: 2 }] } },
      pipeline: { name: "m", tasks: [{ use: "../lib/tasks.mts#work", args: [flag, failOn], resource: "apis" }] },
      source: { range: { n: 4 } }
    })
    write(dir, "members/a.json", member(1))
    write(dir, "members/b.json", member(-1))
    const suite = write(dir, "suite.json", {
      suite: { id: "cmp" },
      run: { concurrency: 4 },
      output: { root: "out/cmp", layout },
      pools: { shared: { resources: [{ id: "s", capacity: 2 }] } },
      experiments: {
        b: { config: "members/b.json" },
        a: { config: "members/a.json", poolBindings: { apis: "shared" }, label: "A" }
      }
    })
    fs.writeFileSync(flag, "")
    const first = yield* assay(["run", "-c", suite])
    assert.strictEqual(first.code, 1, `${first.stdout}\n${first.stderr}`)
    fs.rmSync(flag)
    const second = yield* assay(["resume", "-c", suite])
    assert.strictEqual(second.code, 0, `${second.stdout}\n${second.stderr}`)
    return { dir, root: path.join(dir, "out/cmp") }
  })

const jsonOf = (r: Ran): any => {
  assert.strictEqual(r.code, 0, r.stderr)
  return JSON.parse(r.stdout)
}

/** serve ROOT on 127.0.0.1: /experiments, ?experiment= with run_id, the dashboard's member links. */
const checkServe = (root: string, runA: string) =>
  Effect.acquireUseRelease(
    Effect.sync(() => start(["serve", root, "--port", "0"]).child),
    (child) =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() =>
          new Promise<string>((resolve, reject) => {
            let seen = ""
            child.stdout!.on("data", (d: Buffer) => {
              seen += d.toString()
              const m = /at (http:\/\/127\.0\.0\.1:\d+)\//.exec(seen)
              if (m !== null) resolve(m[1]!)
            })
            child.on("close", (code) => reject(new Error(`serve exited ${code}`)))
          })
        )
        const get = (route: string) => Effect.promise(async () => {
          const r = await fetch(`${url}${route}`)
          return { status: r.status, body: await r.text() }
        })
        const ex = yield* get("/experiments")
        assert.strictEqual(ex.status, 200)
        const members = JSON.parse(ex.body)
        assert.strictEqual(members.suite_id, "cmp")
        assert.deepStrictEqual(members.rows.map((m: any) => [m.experiment_id, m.pipelines, m.source_status]), [
          ["a", 4, "exhausted"],
          ["b", 4, "exhausted"]
        ])
        const st = JSON.parse((yield* get(`/stats?experiment=a&run_id=${encodeURIComponent(runA)}`)).body)
        assert.strictEqual(st.pipelines.by_state.failed, 1)
        assert.strictEqual(st.suite.experiment, "a")
        const res = JSON.parse((yield* get("/resources?experiment=a")).body)
        assert.isTrue(res.rows.length > 0 && res.rows.every((r: any) => r.pool !== "experiment:b:apis"))
        assert.strictEqual((yield* get("/stats?experiment=zz")).status, 404)
        const page = (yield* get("/")).body
        assert.include(page, `href="/?experiment=a"`)
        assert.include(page, `href="/?experiment=b"`)
      }),
    (child) => Effect.sync(() => child.kill("SIGTERM"))
  )

describe("assay report / export / serve on a suite root", { timeout: 240_000 }, () => {
  it.live("the help of report, watch, serve and export names a suite root", () =>
    Effect.gen(function*() {
      for (const command of ["report", "watch", "serve", "export"]) {
        const r = yield* assay([command, "--help"])
        assert.strictEqual(r.code, 0, r.stderr)
        assert.include(r.stdout, "suite root", command)
      }
    }))

  it.live("byExperiment: report views, exports, serve", () =>
    Effect.gen(function*() {
      const { dir, root } = yield* makeRoot("byExperiment")

      // report: the cumulative view by default
      const all = jsonOf(yield* assay(["report", root, "--json"]))
      assert.strictEqual(all.selection, "cumulative")
      assert.notProperty(all, "study", "a plain suite root has no study header")
      assert.strictEqual(all.suite.suiteId, "cmp")
      assert.strictEqual(all.pipelines, 8)
      assert.strictEqual(all.byState.succeeded, 8)
      assert.deepStrictEqual(all.members.map((m: any) => [m.experimentId, m.label, m.pipelines, m.sourceStatus]), [
        ["a", "A", 4, "exhausted"],
        ["b", null, 4, "exhausted"]
      ])
      const pools = new Map(all.resources.map((r: any) => [r.pool, [r.shared, r.experimentId]]))
      assert.deepStrictEqual(pools.get("shared"), [true, null])
      assert.deepStrictEqual(pools.get("experiment:b:apis"), [false, "b"])
      assert.strictEqual(all.runs.length, 2)
      const [runA, runB] = all.runs.map((r: any) => r.runId as string)
      const text = yield* assay(["report", root])
      assert.strictEqual(text.code, 0, text.stderr)
      assert.match(text.stdout, /Suite cmp \(byExperiment\).*all members, cumulative view/)
      assert.match(text.stdout, /a \[A\]: 4 pipeline\(s\)/)
      assert.match(text.stdout, /shared\/s \(.*shared\)/)

      // --run-id: the durable outcomes of each invocation
      const a1 = jsonOf(yield* assay(["report", root, "--json", "--run-id", runA!]))
      assert.strictEqual(a1.byState.failed, 1, "run 1's failure stays failed after run 2 succeeded")
      assert.strictEqual(a1.byState.succeeded, 7)
      assert.deepStrictEqual(a1.members.map((m: any) => [m.experimentId, m.byState.failed]), [["a", 1], ["b", 0]])
      assert.deepStrictEqual(a1.errors.map((e: any) => [e.runId, e.errorMessage]), [[runA, "row 1 is bad"]])
      const b2 = jsonOf(yield* assay(["report", root, "--json", "--run-id", runB!]))
      assert.strictEqual(b2.pipelines, 1)
      assert.strictEqual(b2.byState.succeeded, 1)
      assert.strictEqual(b2.skipped, 7)

      // --experiment: one member
      const onlyB = jsonOf(yield* assay(["report", root, "--json", "--experiment", "b"]))
      assert.deepStrictEqual(onlyB.members.map((m: any) => m.experimentId), ["b"])
      assert.strictEqual(onlyB.pipelines, 4)
      assert.isFalse(onlyB.resources.some((r: any) => r.pool === "experiment:a:apis"))
      const unknown = yield* assay(["report", root, "--experiment", "zz"])
      assert.strictEqual(unknown.code, 2)
      assert.match(unknown.stderr, /no member "zz"/)
      assert.strictEqual((yield* assay(["report", root, "--run-id", "nope"])).code, 2)
      const plain = path.join(root, "experiments", "a", "state.db")
      const notSuite = yield* assay(["report", plain, "--experiment", "a"])
      assert.strictEqual(notSuite.code, 2)
      assert.match(notSuite.stderr, /only a suite root .* has members/)

      // export: results rows carry suite, member, local key and repeat
      const out = path.join(dir, "results.jsonl")
      const exp = yield* assay(["export", root, out, "--rows", "results"])
      assert.strictEqual(exp.code, 0, exp.stderr)
      const rows = fs.readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(rows.length, 8)
      for (const r of rows) {
        assert.strictEqual(r.suiteId, "cmp")
        assert.include(["a", "b"], r.experimentId)
        assert.isString(r.localKey)
        // content-addressed members: the stored key is null, as outside suites (docs/suites.md)
        assert.isNull(r.key)
        assert.strictEqual(r.repeat, 0)
        assert.strictEqual(r.state, "succeeded")
      }
      const tasksOut = path.join(dir, "tasks-a.jsonl")
      assert.strictEqual((yield* assay(["export", root, tasksOut, "--rows", "tasks", "--experiment", "a"])).code, 0)
      const tasks = fs.readFileSync(tasksOut, "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.strictEqual(tasks.length, 5) // 4 rows + the re-run of row 1
      assert.isTrue(tasks.every((t) => t.experimentId === "a" && t.suiteId === "cmp"))

      // --by-experiment: OUT/ID/ROWS.FORMAT, members in id order
      const split = path.join(dir, "split")
      const s = yield* assay(["export", root, split, "--rows", "results", "--by-experiment"])
      assert.strictEqual(s.code, 0, s.stderr)
      assert.match(s.stdout, /a 4, b 4/)
      assert.deepStrictEqual(fs.readdirSync(split).sort(), ["a", "b"])
      const aRows = fs.readFileSync(path.join(split, "a", "results.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
      assert.isTrue(aRows.length === 4 && aRows.every((r) => r.experimentId === "a"))
      const csv = yield* assay(["export", root, split, "--rows", "attempts", "--format", "csv", "--by-experiment"])
      assert.strictEqual(csv.code, 0, csv.stderr)
      assert.isTrue(fs.existsSync(path.join(split, "b", "attempts.csv")))
      assert.strictEqual((yield* assay(["export", plain, split, "--by-experiment"])).code, 2)
      // into an existing FILE: a clear refusal (exit 2), the file untouched
      const file = path.join(dir, "taken.jsonl")
      fs.writeFileSync(file, "keep\n")
      const intoFile = yield* assay(["export", root, file, "--rows", "results", "--by-experiment"])
      assert.strictEqual(intoFile.code, 2, intoFile.stderr)
      assert.match(intoFile.stderr, /is an existing file, not a directory/)
      assert.notMatch(intoFile.stderr, /ENOTDIR/)
      assert.strictEqual(fs.readFileSync(file, "utf8"), "keep\n")
      // --experiment resolves case-insensitively to the canonical member id
      const upper = yield* assay(["report", root, "--experiment", "A", "--json"])
      assert.strictEqual(upper.code, 0, upper.stderr)
      assert.strictEqual(JSON.parse(upper.stdout).suite.experiment, "a")

      yield* checkServe(root, runA!)
    }))

  it.live("combined: the same views and a split export from one database", () =>
    Effect.gen(function*() {
      const { dir, root } = yield* makeRoot("combined")
      const all = jsonOf(yield* assay(["report", root, "--json"]))
      assert.strictEqual(all.suite.layout, "combined")
      assert.deepStrictEqual(all.members.map((m: any) => [m.experimentId, m.pipelines]), [["a", 4], ["b", 4]])
      const runA = all.runs[0].runId as string
      const a1 = jsonOf(yield* assay(["report", root, "--json", "--run-id", runA, "--experiment", "a"]))
      assert.strictEqual(a1.byState.failed, 1)
      // watch (not a terminal): the suite is not running, so one line and the final picture
      const w = yield* assay(["watch", root, "--interval", "0.2"])
      assert.strictEqual(w.code, 0, w.stderr)
      assert.match(w.stdout, /all runs \(2\)/)
      assert.match(w.stdout, /suite cmp \(combined\)/)
      assert.match(w.stdout, /  a: 4 \(4 ok · 0 failed · 0 interrupted\) · source exhausted/)
      const wa = yield* assay(["watch", root, "--interval", "0.2", "--experiment", "a", "--run-id", runA])
      assert.strictEqual(wa.code, 0, wa.stderr)
      assert.match(wa.stdout, /suite cmp \(combined\) · member a/)
      assert.match(wa.stdout, /pipelines 4: 3 succeeded · 1 failed/)
      assert.strictEqual((yield* assay(["watch", root, "--experiment", "zz"])).code, 2)
      yield* checkServe(root, runA)
      const split = path.join(dir, "split")
      const s = yield* assay(["export", root, split, "--rows", "results", "--by-experiment"])
      assert.strictEqual(s.code, 0, s.stderr)
      for (const id of ["a", "b"]) {
        const rows = fs.readFileSync(path.join(split, id, "results.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
        assert.isTrue(rows.length === 4 && rows.every((r) => r.experimentId === id), id)
      }
    }))
})
