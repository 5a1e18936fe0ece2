/**
 * An experiment whose pipeline declares `control` (a rewind with a value, a forward handoff to
 * the end) on `assay run --engine cluster`, through `bin/assay` on the harness PostgreSQL: one
 * runner (`assay runner`), the submitter, and the same experiment on the embedded engine into
 * an SQLite store. `assay export --rows handoffs` and `assay report --json` read the cluster's
 * Postgres store as they read the embedded one: the same ledger rows (but their ids, run and
 * time), the same handoff total, the same final results.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, root, start, tempDir, write } from "../support/cli.js"
import { freePort, usePostgres } from "../support/postgres.js"

// a Postgres test fails (never skips) where PostgreSQL is missing: .ci/run installs it
const pg = usePostgres()

/** The plugin of the experiment: `gen → check → report`, `check` rewinding and ending early. */
const plugin = [
  `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
  `import * as Handoff from ${JSON.stringify(path.join(root, "src/domain/Handoff.ts"))}`,
  `export const tasks = {`,
  `  gen: Task.sync("gen", (row: any, ctx: any) => ({ n: typeof row === "number" ? row : row.n, hint: row?.hint ?? null, visit: ctx.visit })),`,
  `  check: Task.sync("check", (d: any, ctx: any) =>`,
  `    ctx.visit === 0 ? Handoff.rewind("gen", { n: d.n, hint: "again" }, { reason: "first draft refused" })`,
  `      : d.n % 2 === 1 ? Handoff.to("end", { ...d, ended: true }, { reason: "odd: done" }) : d),`,
  `  report: Task.sync("report", (d: any) => ({ ...d, ok: true }))`,
  `}`
].join("\n")

/** The rows of a JSONL export without what differs between two runs (ids, run, time). */
const ledger = (file: string) =>
  fs.readFileSync(file, "utf8").trim().split("\n").filter((l) => l !== "").map((l) => {
    const { handoffId: _id, runId: _run, ts: _ts, ...rest } = JSON.parse(l) as Record<string, unknown>
    return JSON.stringify(rest)
  }).sort()

describe("a control experiment on --engine cluster", () => {
  it.scopedLive("runs on one runner; export and report read its Postgres store as the embedded engine's", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-control")
      write(dir, "ctl.ts", plugin)
      const file = write(dir, "exp.json", {
        plugins: ["./ctl.ts"],
        pipeline: {
          name: "ctl",
          tasks: [{ use: "gen" }, { use: "check" }, { use: "report" }],
          control: { edges: { check: ["end"] }, rewind: { check: ["gen"] }, maxHandoffs: 3 }
        },
        source: { range: { n: 4 } }
      })
      yield* Effect.promise(() => pg.createDatabase("ctl"))
      const url = pg.url("ctl")
      assert.strictEqual((yield* assay(["migrate", "--database", url])).code, 0)
      const port = yield* Effect.promise(freePort)
      const runner = start(["runner", "-c", file, "--database", url, "--listen", `127.0.0.1:${port}`])
      yield* Effect.addFinalizer(() => Effect.sync(() => runner.child.kill("SIGKILL")))
      const sub = yield* assay(["run", "-c", file, "--engine", "cluster", "--database", url])
      assert.strictEqual(sub.code, 0, sub.stderr + runner.stderr())
      assert.match(sub.stdout, /4 succeeded, 0 failed/)
      // the embedded engine, same experiment
      const ref = path.join(dir, "ref.db")
      const embedded = yield* assay(["run", "-c", file, "--store", ref])
      assert.strictEqual(embedded.code, 0, embedded.stderr)
      for (const [store, out] of [[url, "cluster.jsonl"], [ref, "ref.jsonl"]] as const) {
        const r = yield* assay(["export", store, path.join(dir, out), "--rows", "handoffs"])
        assert.strictEqual(r.code, 0, r.stderr)
      }
      const rows = ledger(path.join(dir, "cluster.jsonl"))
      // a rewind per pipeline, an end for the odd ones
      assert.strictEqual(rows.length, 6)
      assert.deepStrictEqual(rows, ledger(path.join(dir, "ref.jsonl")))
      const reportOf = (store: string) =>
        Effect.map(assay(["report", "--json", store]), (r) => {
          assert.strictEqual(r.code, 0, r.stderr)
          return JSON.parse(r.stdout) as { readonly handoffsTotal: number; readonly handoffsBudgeted: number; readonly [k: string]: unknown }
        })
      const cluster = yield* reportOf(url)
      assert.strictEqual(cluster.handoffsTotal, 6)
      // the 4 rewinds spent budget, the 2 ends did not (Postgres and SQLite count alike)
      assert.strictEqual(cluster.handoffsBudgeted, 4)
      const reference = yield* reportOf(ref)
      assert.deepStrictEqual([cluster.handoffsTotal, cluster.handoffsBudgeted], [reference.handoffsTotal, reference.handoffsBudgeted])
      // the final results, pipeline by pipeline
      for (const [store, out] of [[url, "cluster-results.jsonl"], [ref, "ref-results.jsonl"]] as const) {
        assert.strictEqual((yield* assay(["export", store, path.join(dir, out), "--rows", "results"])).code, 0)
      }
      const results = (f: string) => fs.readFileSync(path.join(dir, f), "utf8").trim().split("\n").map((l) => {
        const { endedAt: _e, runId: _r, startedAt: _s, ...rest } = JSON.parse(l) as Record<string, unknown>
        return JSON.stringify(rest)
      }).sort()
      assert.deepStrictEqual(results("cluster-results.jsonl"), results("ref-results.jsonl"))
    }), 240_000)
})
