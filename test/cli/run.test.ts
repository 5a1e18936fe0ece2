/**
 * The CLI as a user runs it: spawned `bin/assay` processes on real files in a temp dir.
 * validate / run / resume / plugins / schema, exit codes, env expansion, formats, progress,
 * shards (including a killed shard), and the user cases C1 (Ctrl-C), C2 (SIGKILL + stale),
 * C3(b) (bounded retries) and C7 (typos).
 *
 * Each spawn costs ~1.5 s of start-up (CPU-bound, so running tests concurrently on 2 cores
 * does not help): tests share spawns where the assertions allow, and use small item counts.
 */
import { assert, describe, it } from "@effect/vitest"
import Database from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

import { assay, count, exec, query, root, sleep, start, waitFor, write } from "../support/cli.js"

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "assay-cli-"))
const integrityOk = (db: string): boolean => {
  const d = new Database(db)
  try {
    return (d.pragma("integrity_check", { simple: true }) as string) === "ok"
  } finally {
    d.close()
  }
}

const delayExperiment = (n: number, ms: number, concurrency: number, extra = "") => `{
  "run": { "concurrency": ${concurrency}${extra} },
  "pipeline": { "name": "sleepy", "tasks": [{ "use": "delay", "args": ["${ms} millis"] }] },
  "source": { "range": { "n": ${n} } }
}`

// ---------------------------------------------------------------------------------------------

describe("assay validate", () => {
  it.live("C7: every typo at once, with paths and suggestions; run refuses before any store", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "typos.yaml", [
        "run:",
        "  concurency: 5",
        "pipeline:",
        "  name: typos",
        "  retry:",
        "    maxAttempts: 3",
        "  tasks:",
        "    - use: dealy",
        "      args: [10 millis]",
        "source:",
        "  range: { n: 3 }"
      ].join("\n"))
      const v = yield* assay(["validate", "-c", file])
      assert.strictEqual(v.code, 2)
      assert.include(v.stderr, "run.concurency")
      assert.include(v.stderr, "did you mean concurrency?")
      assert.include(v.stderr, "pipeline.retry")
      assert.include(v.stderr, "pipeline.tasks[].retry")
      assert.include(v.stderr, "pipeline.tasks[0].use")
      assert.include(v.stderr, "did you mean delay?")
      // --json describes an invalid file on stdout too (for tools), still exiting 2
      const j = yield* assay(["validate", "-c", file, "--json"])
      assert.strictEqual(j.code, 2)
      const described = JSON.parse(j.stdout) as { valid: boolean; issues: Array<{ path: string; suggestion?: string }> }
      assert.isFalse(described.valid)
      assert.include(described.issues.map((i) => i.path), "run.concurency")
      assert.include(described.issues.map((i) => i.suggestion), "did you mean concurrency?")
      const store = path.join(dir, "never.db")
      const r = yield* assay(["run", "-c", file, "--store", store])
      assert.strictEqual(r.code, 2)
      assert.strictEqual(r.stderr, v.stderr)
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), ["typos.yaml"])
    }))

  it.live("field paths for nested problems, bare-number durations, unknown pools and algorithms", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "bad.json", JSON.stringify({
        run: { grace: 5 },
        pools: { apis: { algorithm: "bakoff", resources: [{ capacity: 2 }, { capacity: 0 }] } },
        pipeline: {
          name: "p",
          tasks: [
            { use: "simulateLlm", options: { resource: "apiz" } },
            { use: "delay", args: ["1 millis"], resource: "gpus", timeout: 3 }
          ]
        },
        source: { jsonl: { path: "missing.jsonl" } }
      }))
      const v = yield* assay(["validate", "-c", file])
      assert.strictEqual(v.code, 2)
      for (const needle of [
        "run.grace: a bare number (5) is not a duration",
        "pools.apis.resources[1].capacity",
        "pools.apis.algorithm.name: unknown algorithm \"bakoff\"",
        "did you mean \"backoff\"?",
        "pipeline.tasks[1].timeout",
        "pipeline.tasks[0].use: no pool named \"apiz\"",
        "did you mean apis?",
        "pipeline.tasks[1].resource: no pool named \"gpus\"",
        "source.jsonl.path: no such file"
      ]) assert.include(v.stderr, needle)
    }))

  it.live("YAML 1.1 bare on: read as a boolean is caught with a plain message", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "on.yaml", [
        "%YAML 1.1",
        "---",
        "pipeline:",
        "  name: p",
        "  tasks:",
        "    - use: echo",
        "      retry:",
        "        on: [RetryableError]",
        "source: { range: { n: 1 } }"
      ].join("\n"))
      const v = yield* assay(["validate", "-c", file])
      assert.strictEqual(v.code, 2)
      assert.include(v.stderr, "read as the boolean true")
      assert.include(v.stderr, "\"on\"")
    }))

  it.live("env expansion: defaults, unresolved listed, --strict-env refuses", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "env.json", JSON.stringify({
        run: { label: "${RUN_LABEL:-fallback}" },
        pools: { apis: { resources: [{ options: { apiKey: "${ASSAY_TEST_SECRET}" } }] } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      }))
      const unset = { ASSAY_TEST_SECRET: undefined, RUN_LABEL: undefined }
      const loose = yield* assay(["validate", "-c", file, "--json"], { env: unset })
      assert.strictEqual(loose.code, 0)
      const d = JSON.parse(loose.stdout)
      assert.strictEqual(d.run.label, "fallback")
      // an inline key naming an unset variable is read as the key variable (tester18g F5)
      assert.deepStrictEqual(d.unresolvedEnv, [{ name: "ASSAY_TEST_SECRET", path: "pools.apis.resources[0].options.apiKeyEnv" }])
      const strict = yield* assay(["validate", "-c", file, "--strict-env"], { env: unset })
      assert.strictEqual(strict.code, 2)
      assert.include(strict.stderr, "ASSAY_TEST_SECRET is not set")
      const set = yield* assay(["validate", "-c", file, "--strict-env", "--json"], {
        env: { ASSAY_TEST_SECRET: "sk-123", RUN_LABEL: "nightly" }
      })
      assert.strictEqual(set.code, 0)
      const s = JSON.parse(set.stdout)
      assert.strictEqual(s.run.label, "nightly")
      assert.deepStrictEqual(s.unresolvedEnv, [])
      assert.notInclude(set.stdout, "sk-123") // secrets are masked in the description
    }))

  it.live("JSON, TOML, YAML and TypeScript examples describe the same pipeline (same ids)", () =>
    Effect.gen(function*() {
      const digests: Array<string> = []
      // The TypeScript one is checked through its run below (same pipeline ids ⇒ same spec digest).
      for (const ext of ["json", "toml", "yaml"]) {
        const v = yield* assay(["validate", "-c", path.join(root, `examples/experiments/delay.${ext}`), "--json"])
        assert.strictEqual(v.code, 0, v.stderr)
        digests.push(JSON.parse(v.stdout).pipeline.specDigest)
      }
      assert.strictEqual(new Set(digests).size, 1)
      // And the runs agree on the pipeline ids.
      const dir = tmp()
      const ids: Array<Array<string>> = []
      for (const ext of ["json", "ts"]) {
        const store = path.join(dir, `${ext}.db`)
        const r = yield* assay(["run", "-c", path.join(root, `examples/experiments/delay.${ext}`), "--store", store])
        assert.strictEqual(r.code, 0, r.stderr)
        ids.push(query<{ pipeline_id: string }>(store, "SELECT pipeline_id FROM pipelines ORDER BY pipeline_id").map((r) => r.pipeline_id))
      }
      assert.strictEqual(ids[0]!.length, 8)
      assert.deepStrictEqual(ids[0], ids[1])
    }))

  it.live("schema prints a JSON Schema of the file", () =>
    Effect.gen(function*() {
      const s = yield* assay(["schema"])
      assert.strictEqual(s.code, 0)
      const schema = JSON.parse(s.stdout)
      assert.strictEqual(schema.$schema, "http://json-schema.org/draft-07/schema#")
      assert.deepStrictEqual(schema.required, ["pipeline", "source"])
      assert.includeMembers(Object.keys(schema.properties), ["run", "pools", "pipeline", "source", "plugins"])
    }))
})

describe("assay run", () => {
  it.live("exit codes: 0 success, 1 failures (C3b: 5 items x 4 attempts = 20, class rate_limit), summary json", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const ok = write(dir, "ok.json", delayExperiment(5, 1, 2))
      const good = yield* assay(["run", "-c", ok, "--store", path.join(dir, "ok.db"), "--summary", "json"])
      assert.strictEqual(good.code, 0, good.stderr)
      const report = JSON.parse(good.stdout)
      assert.strictEqual(report.status, "completed")
      assert.strictEqual(report.stats.pipelines.byState.succeeded, 5)

      const bad = write(dir, "429.json", JSON.stringify({
        run: { concurrency: 5 },
        pipeline: {
          name: "always429",
          tasks: [{
            use: "boom",
            args: ["429 too many requests"],
            options: { errorClass: "rate_limit" },
            retry: { maxAttempts: 4, base: "1 millis", cap: "4 millis" }
          }]
        },
        source: { range: { n: 5 } }
      }))
      const store = path.join(dir, "429.db")
      const r = yield* assay(["run", "-c", bad, "--store", store])
      assert.strictEqual(r.code, 1, r.stderr)
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts"), 20)
      assert.deepStrictEqual(
        query(store, "SELECT pipeline_id, count(*) AS n FROM attempts GROUP BY pipeline_id").map((x) => x["n"]),
        [4, 4, 4, 4, 4]
      )
      assert.deepStrictEqual(
        query(store, "SELECT DISTINCT state, error_class FROM pipelines"),
        [{ state: "failed", error_class: "rate_limit" }]
      )
    }))

  it.live("overrides: --limit, --concurrency, --label, --run-id, --journal; resume skips finished work", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "e.json", delayExperiment(10, 1, 2))
      const store = path.join(dir, "e.db")
      const a = yield* assay([
        "run", "-c", file, "--store", store, "--limit", "4", "--concurrency", "3", "--label", "first",
        "--run-id", "run-one", "--journal", "summary", "--summary", "json"
      ])
      assert.strictEqual(a.code, 0, a.stderr)
      assert.strictEqual(JSON.parse(a.stdout).stats.pipelines.total, 4)
      const run = query(store, "SELECT run_id, label, config FROM runs")[0]!
      assert.strictEqual(run["run_id"], "run-one")
      assert.strictEqual(run["label"], "first")
      const config = JSON.parse(String(run["config"]))
      assert.strictEqual(config.concurrency, 3)
      assert.strictEqual(config.journal, "summary")
      const b = yield* assay(["resume", "-c", file, "--store", store, "--summary", "json"])
      assert.strictEqual(b.code, 0, b.stderr)
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 10)
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts"), 10)
      const bad = yield* assay(["run", "-c", file, "--store", store, "--stop-after", "5"])
      assert.strictEqual(bad.code, 2)
      assert.include(bad.stderr, "--stop-after")
    }))

  it.live("progress: plain lines on stderr when not a TTY, none with --quiet; the source size is recorded as meta.total", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "p.json", delayExperiment(6, 60, 2))
      const store = path.join(dir, "p.db")
      const r = yield* assay(["run", "-c", file, "--store", store, "--progress-interval", "50 millis", "--summary", "json"])
      assert.strictEqual(r.code, 0, r.stderr)
      // stdout is the report alone; the progress went to stderr.
      assert.strictEqual(JSON.parse(r.stdout).stats.pipelines.byState.succeeded, 6)
      const lines = r.stderr.trim().split("\n")
      assert.isAtLeast(lines.length, 2, r.stderr)
      for (const line of lines) assert.match(line, /^\[[#.]+\] \d+\/6 \d+\.\d% · /)
      assert.notInclude(r.stderr, "\r", "plain lines, no redraw, when stderr is not a terminal")
      assert.match(lines[lines.length - 1]!, /\] 6\/6 100\.0% · .* 0 failed/)
      assert.deepStrictEqual(JSON.parse(String(query(store, "SELECT meta FROM runs")[0]!["meta"])), { total: 6 })

      // jsonl: the non-blank rows are counted (bounded by --limit and source.limit), times
      // repeats; --quiet prints nothing on stderr.
      write(dir, "rows.jsonl", ["1", "2", "", "3", "4", "5"].join("\n") + "\n")
      const totals: Array<unknown> = []
      for (const [limit, flags] of [[undefined, []], [4, ["--limit", "3"]]] as const) {
        const conf = write(dir, `j${limit}.json`, JSON.stringify({
          pipeline: { name: "j", tasks: [{ use: "echo" }] },
          source: { jsonl: { path: "rows.jsonl", ...(limit === undefined ? {} : { limit }) }, repeats: 2 }
        }))
        const db = path.join(dir, `j${limit}.db`)
        const j = yield* assay(["run", "-c", conf, "--store", db, "--quiet", "--progress-interval", "1 millis", ...flags])
        assert.strictEqual(j.code, 0, j.stderr)
        assert.strictEqual(j.stderr, "")
        assert.include(j.stdout, "succeeded")
        totals.push(JSON.parse(String(query(db, "SELECT meta FROM runs")[0]!["meta"])).total)
        assert.strictEqual(count(db, "SELECT count(*) FROM pipelines"), totals[totals.length - 1])
      }
      assert.deepStrictEqual(totals, [10, 6])
    }))

  it.live("shellRun and writeJsonl through a config: {value} is one literal argument", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const values = ["plain", "two words", "quote \" and ' and $(touch pwned)", "semi; rm -rf /"]
      write(dir, "rows.jsonl", values.map((v) => JSON.stringify(v)).join("\n") + "\n")
      const file = write(dir, "sh.yaml", [
        "pipeline:",
        "  name: shell",
        "  tasks:",
        "    - use: shellRun",
        "      args: [[node, -e, \"process.stdout.write(JSON.stringify(process.argv.slice(1)))\", \"{value}\"]]",
        "      options: { timeout: 20 seconds }",
        "    - use: writeJsonl",
        "      args: [out/results.jsonl]",
        "source:",
        "  jsonl: { path: rows.jsonl }"
      ].join("\n"))
      const r = yield* assay(["run", "-c", file, "--store", path.join(dir, "sh.db")])
      assert.strictEqual(r.code, 0, r.stderr)
      const lines = fs.readFileSync(path.join(dir, "out/results.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l))
      const seen = lines.map((l) => JSON.parse(l.stdout) as Array<string>)
      assert.deepStrictEqual(seen.map((argv) => argv.length), [1, 1, 1, 1])
      assert.deepStrictEqual(seen.map((argv) => argv[0]).sort(), [...values].sort())
      assert.isFalse(fs.existsSync(path.join(dir, "pwned")))
      const str = write(dir, "str.json", JSON.stringify({
        pipeline: { name: "s", tasks: [{ use: "shellRun", args: ["echo {value}"] }] },
        source: { range: { n: 1 } }
      }))
      const refused = yield* assay(["validate", "-c", str])
      assert.strictEqual(refused.code, 2)
      assert.include(refused.stderr, "argv")
    }))
})

describe("assay run: signals, crashes, shards", () => {
  it.live("C1: SIGINT at ~1 s → 130, nothing new starts, store intact, resume does exactly the rest", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "c1.json", delayExperiment(20, 300, 4))
      const store = path.join(dir, "c1.db")
      const p = start(["run", "-c", file, "--store", store])
      yield* Effect.promise(() => waitFor(() => fs.existsSync(store) && count(store, "SELECT count(*) FROM tasks") > 0, "first task"))
      yield* Effect.promise(() => sleep(700))
      const signalAt = Date.now()
      p.child.kill("SIGINT")
      const r = yield* Effect.promise(() => p.done)
      assert.strictEqual(r.code, 130, r.stderr)
      assert.isTrue(integrityOk(store))
      const run1 = query(store, "SELECT run_id, status FROM runs")[0]!
      assert.strictEqual(run1["status"], "interrupted")
      // Attempt rows carry the real start of each attempt (a task row is written at admission).
      const started = count(store, "SELECT count(*) FROM attempts")
      const endedBefore = count(store, "SELECT count(*) FROM attempts WHERE ended_at <= ?", signalAt)
      assert.isAtMost(started, endedBefore + 4, "no task started after the signal beyond those in flight")
      const done1 = count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
      assert.strictEqual(done1, count(store, "SELECT count(*) FROM tasks WHERE state = 'succeeded'"))
      assert.isBelow(done1, 20)
      // the end of the run says exactly how to resume it; that command does the rest
      const printed = /resume with: (.*)/.exec(r.stderr)?.[1]
      assert.strictEqual(printed, `assay resume -c ${file} --store ${store}`, r.stderr)
      const r2 = yield* assay(printed!.split(" ").slice(1))
      assert.strictEqual(r2.code, 0, r2.stderr)
      assert.notInclude(r2.stderr, "resume with:")
      assert.include(r2.stdout, `results: assay report ${store} · assay export ${store} results.jsonl`)
      const run2 = query<{ run_id: string }>(store, "SELECT run_id FROM runs ORDER BY started_at")[1]!.run_id
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts WHERE run_id = ?", run2), 20 - done1)
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 20)
      const r3 = yield* assay(["resume", "-c", file, "--store", store])
      assert.strictEqual(r3.code, 0, r3.stderr)
      const run3 = query<{ run_id: string }>(store, "SELECT run_id FROM runs ORDER BY started_at")[2]!.run_id
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts WHERE run_id = ?", run3), 0)
      assert.isTrue(integrityOk(store))
    }))

  it.live("C1: concurrency 1 with 200 ms tasks, and a second SIGINT 100 ms after the first", () =>
    Effect.gen(function*() {
      const dir = tmp()
      for (const double of [false, true]) {
        const file = write(dir, `c1-${double}.json`, delayExperiment(12, 200, 1))
        const store = path.join(dir, `c1-${double}.db`)
        const p = start(["run", "-c", file, "--store", store])
        yield* Effect.promise(() => waitFor(() => fs.existsSync(store) && count(store, "SELECT count(*) FROM tasks") > 0, "first task"))
        yield* Effect.promise(() => sleep(500))
        p.child.kill("SIGINT")
        if (double) {
          yield* Effect.promise(() => sleep(100))
          p.child.kill("SIGINT")
        }
        const r = yield* Effect.promise(() => p.done)
        assert.strictEqual(r.code, 130, r.stderr)
        assert.isTrue(integrityOk(store))
        assert.strictEqual(query(store, "SELECT status FROM runs")[0]!["status"], "interrupted")
        const done1 = count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
        assert.strictEqual(done1, count(store, "SELECT count(*) FROM tasks WHERE state = 'succeeded'"))
        // the rest (about 9 tasks of 200 ms) at once, not one at a time: ~1.6 s of waiting less
        const r2 = yield* assay(["resume", "-c", file, "--store", store, "--concurrency", "12"])
        assert.strictEqual(r2.code, 0, r2.stderr)
        assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 12)
        assert.strictEqual(count(store, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'"), 12)
      }
    }))

  it.live("C2: SIGKILL half way; the run goes stale, resume completes it; its in-flight pipelines are events, not invented attempts", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "c2.json", delayExperiment(30, 200, 4, `, "heartbeat": "100 millis", "staleAfter": "600 millis"`))
      const store = path.join(dir, "c2.db")
      const p = start(["run", "-c", file, "--store", store])
      yield* Effect.promise(() =>
        waitFor(() => fs.existsSync(store) && count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'") >= 12, "half")
      )
      p.child.kill("SIGKILL")
      const r = yield* Effect.promise(() => p.done)
      assert.isNull(r.code)
      const inFlight = query<{ pipeline_id: string }>(store, "SELECT pipeline_id FROM pipelines WHERE state = 'running'")
        .map((x) => x.pipeline_id)
      assert.isAbove(inFlight.length, 0)
      yield* Effect.promise(() => sleep(800))
      const run1 = query(store, "SELECT run_id, status, heartbeat_at FROM runs")[0]!
      assert.isAbove(Date.now() - Number(run1["heartbeat_at"]), 600, "its heartbeat is stale")
      const r2 = yield* assay(["resume", "-c", file, "--store", store])
      assert.strictEqual(r2.code, 0, r2.stderr)
      const after = query(store, "SELECT status, stop_reason FROM runs WHERE run_id = ?", run1["run_id"])[0]!
      assert.strictEqual(after["status"], "interrupted")
      assert.strictEqual(after["stop_reason"], "stale")
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 30)
      // issue 18 F3: no attempt row is invented for what the dead run had in flight (admitted,
      // waiting for a worker slot, or running): one pipeline.abandoned event per pipeline
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts WHERE error_type = 'Abandoned'"), 0)
      const abandoned = query<{ pipeline_id: string; run_id: string; data: string }>(
        store,
        "SELECT pipeline_id, run_id, data FROM events WHERE kind = 'pipeline.abandoned'"
      )
      assert.deepStrictEqual(abandoned.map((a) => a.pipeline_id).sort(), [...inFlight].sort())
      for (const a of abandoned) {
        assert.deepStrictEqual(JSON.parse(a.data), { run: run1["run_id"], task: "delay", seq: 0, attemptNo: 1 })
      }
      // the claiming run says it records events (report then reads no attempt rows for it)
      assert.deepInclude(
        JSON.parse(query<{ data: string }>(store, "SELECT data FROM events WHERE kind = 'run.stale_interrupted'")[0]!.data),
        { staleRunId: run1["run_id"], inFlight: "events" }
      )
      // attempts are what ran and was recorded: one per task (no retries here)
      assert.strictEqual(count(store, "SELECT count(*) FROM attempts"), count(store, "SELECT count(*) FROM tasks"))
      // the report says how many were in flight and bounds the calls that may have been made
      const resumeRun = abandoned[0]!.run_id
      const text = yield* assay(["report", store])
      assert.strictEqual(text.code, 0, text.stderr)
      assert.include(
        text.stdout,
        `In flight when run ${run1["run_id"]} stopped: ${inFlight.length} pipeline${inFlight.length === 1 ? "" : "s"} (claimed by run ${resumeRun}, which ran them again); ` +
          `up to ${Math.min(4, inFlight.length)} of them (the run's concurrency is 4) may have had a call in progress`
      )
      const json = yield* assay(["report", store, "--json"])
      assert.deepStrictEqual(JSON.parse(json.stdout).inFlightAtStop, [{
        source: store,
        runId: run1["run_id"],
        pipelines: inFlight.length,
        concurrency: 4,
        mayHaveCalled: Math.min(4, inFlight.length),
        claimedBy: [resumeRun],
        legacyRows: 0,
        // the run leased no pool, so the concurrency is the only bound known
        leasedPools: [],
        poolCapacity: null
      }])
      // Each in-flight item ran once more, and only one success is recorded per pipeline.
      assert.deepStrictEqual(
        query(store, "SELECT DISTINCT count(*) AS n FROM attempts WHERE outcome = 'succeeded' GROUP BY pipeline_id"),
        [{ n: 1 }]
      )
    }))

  it.live("after a kill -9, a plain `run` (not resume) finishes what the dead run left: never a success with work left", () =>
    Effect.gen(function*() {
      const dir = tmp()
      // default staleAfter (30 s): only the store's exclusive lock can tell that the run is dead
      const file = write(dir, "k9.json", delayExperiment(24, 200, 4))
      const store = path.join(dir, "k9.db")
      const p = start(["run", "-c", file, "--store", store])
      yield* Effect.promise(() =>
        waitFor(() => fs.existsSync(store) && count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'") >= 8, "a third")
      )
      p.child.kill("SIGKILL")
      yield* Effect.promise(() => p.done)
      assert.isAbove(count(store, "SELECT count(*) FROM pipelines WHERE state = 'running'"), 0)
      const r2 = yield* assay(["run", "-c", file, "--store", store])
      assert.strictEqual(r2.code, 0, r2.stderr)
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'"), 24)
      assert.strictEqual(count(store, "SELECT count(*) FROM pipelines WHERE state <> 'succeeded'"), 0)
      assert.strictEqual(count(store, "SELECT count(*) FROM runs WHERE status = 'running'"), 0)
      assert.strictEqual(count(store, "SELECT count(*) FROM events WHERE kind = 'run.stale_interrupted'"), 1)
    }))

  it.live("shards: one store per shard; a killed shard is reported (exit 1, dead), the same command resumes it; merged = unsharded", () =>
    Effect.gen(function*() {
      const dir = tmp()
      const file = write(dir, "k.json", delayExperiment(16, 250, 1, `, "heartbeat": "100 millis", "staleAfter": "600 millis"`))
      const base = path.join(dir, "k.db")
      const shard1 = path.join(dir, "k.shard1of2.db")
      const argv = ["run", "-c", file, "--store", base, "--shards", "2", "--jobs", "2", "--summary", "json"]
      const p = start(argv)
      yield* Effect.promise(() =>
        waitFor(() => fs.existsSync(shard1) && count(shard1, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'") >= 2, "shard 1 under way")
      )
      // The shard child is `node ... main.ts resume -c FILE --shard 1/2 ...` (its own process group).
      const pids = (yield* exec("ps", ["-eo", "pid=,args="])).stdout.split("\n").filter((l) => l.includes(file) && l.includes("--shard 1/2")).map((l) => Number(l.trim().split(/\s+/)[0]))
      assert.isAbove(pids.length, 0)
      for (const pid of pids) process.kill(pid, "SIGKILL")
      const r = yield* Effect.promise(() => p.done)
      assert.strictEqual(r.code, 1, r.stderr)
      const report = JSON.parse(r.stdout)
      assert.isFalse(report.complete)
      assert.deepStrictEqual(report.dead, [1])
      assert.strictEqual(report.shards[1].status, "dead")
      assert.strictEqual(report.shards[1].signal, "SIGKILL")
      assert.strictEqual(report.shards[0].status, "completed")
      assert.include(r.stderr, "shard 1/2")
      // The merged view includes what the dead shard committed, nothing more.
      const shard0 = count(path.join(dir, "k.shard0of2.db"), "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
      const committed = count(shard1, "SELECT count(*) FROM pipelines WHERE state = 'succeeded'")
      assert.strictEqual(report.merged.byState.succeeded, shard0 + committed)
      assert.isBelow(report.merged.byState.succeeded, 16)

      yield* Effect.promise(() => sleep(800)) // the dead child's heartbeat goes stale
      const again = yield* assay(argv)
      assert.strictEqual(again.code, 0, again.stderr)
      const done = JSON.parse(again.stdout)
      assert.isTrue(done.complete)
      assert.deepStrictEqual(done.dead, [])
      assert.strictEqual(done.merged.pipelines, 16)
      assert.strictEqual(done.merged.byState.succeeded, 16)
      assert.strictEqual(done.merged.duplicates, 0)
      // Finished work was not redone: one successful attempt per pipeline.
      for (const db of [path.join(dir, "k.shard0of2.db"), shard1]) {
        assert.deepStrictEqual(
          query(db, "SELECT DISTINCT count(*) AS n FROM attempts WHERE outcome = 'succeeded' GROUP BY pipeline_id"),
          [{ n: 1 }]
        )
      }
      // The shards hold exactly the pipelines of an unsharded run, split between them.
      const one = path.join(dir, "one.db")
      const single = yield* assay(["run", "-c", file, "--store", one, "--concurrency", "16", "--quiet"])
      assert.strictEqual(single.code, 0, single.stderr)
      const idsOf = (db: string) => query<{ pipeline_id: string }>(db, "SELECT pipeline_id FROM pipelines").map((x) => x.pipeline_id)
      const a = idsOf(path.join(dir, "k.shard0of2.db"))
      const b = idsOf(shard1)
      assert.isAbove(a.length, 0)
      assert.isAbove(b.length, 0)
      assert.deepStrictEqual([...a, ...b].sort(), idsOf(one).sort())
      const bad = yield* assay(["run", "-c", file, "--shard", "2/2"])
      assert.strictEqual(bad.code, 2)
    }))

})

describe("plugins", () => {
  it.live("a broken plugin is listed with its error and does not break configs that do not use it", () =>
    Effect.gen(function*() {
      const dir = tmp()
      write(dir, "good.ts", [
        `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
        `export const tasks = {`,
        `  shout: (suffix: string) => Task.sync("shout", { parameters: { suffix } }, (s: unknown) => String(s).toUpperCase() + suffix),`,
        `  echo: Task.sync("not-the-builtin", () => "plugin echo")`,
        `}`
      ].join("\n"))
      write(dir, "broken.ts", `throw new Error("this plugin is broken")\n`)
      const file = write(dir, "p.json", JSON.stringify({
        plugins: ["./good.ts", "./broken.ts"],
        pipeline: { name: "p", tasks: [{ use: "echo" }, { use: "shout", args: ["!"] }, { use: "writeJsonl", args: ["out.jsonl"] }] },
        source: { range: { n: 2 } }
      }))
      const r = yield* assay(["run", "-c", file, "--store", path.join(dir, "p.db")])
      assert.strictEqual(r.code, 0, r.stderr)
      assert.deepStrictEqual(fs.readFileSync(path.join(dir, "out.jsonl"), "utf8").trim().split("\n").sort(), ["\"0!\"", "\"1!\""])
      const list = yield* assay(["plugins", "-c", file, "--json"])
      assert.strictEqual(list.code, 0, list.stderr)
      const out = JSON.parse(list.stdout)
      assert.includeMembers(out.builtins.tasks.map((t: { name: string }) => t.name), ["echo", "delay", "shellRun", "writeJsonl"])
      const good = out.plugins.find((p: { specifier: string }) => p.specifier === "./good.ts")
      assert.deepStrictEqual(good.tasks, ["shout"])
      assert.deepStrictEqual(good.shadowed, ["echo"])
      const broken = out.plugins.find((p: { specifier: string }) => p.specifier === "./broken.ts")
      assert.include(broken.error, "this plugin is broken")
      const uses = write(dir, "q.json", JSON.stringify({
        plugins: ["./broken.ts"],
        pipeline: { name: "q", tasks: [{ use: "fromBroken" }] },
        source: { range: { n: 1 } }
      }))
      const v = yield* assay(["validate", "-c", uses])
      assert.strictEqual(v.code, 2)
      assert.include(v.stderr, "unknown task \"fromBroken\"")
      assert.include(v.stderr, "this plugin is broken")
    }))

  it.live("use: ./tasks.ts#export relative to the config, factories called with args", () =>
    Effect.gen(function*() {
      const dir = tmp()
      write(dir, "lib/tasks.ts", [
        `import * as Task from ${JSON.stringify(path.join(root, "src/domain/Task.ts"))}`,
        `export const double = Task.sync("double", (n: number) => n * 2)`,
        `export const add = (k: number) => Task.sync("add", { parameters: { k } }, (n: number) => n + k)`
      ].join("\n"))
      const file = write(dir, "conf/m.toml", [
        `[pipeline]`,
        `name = "math"`,
        `[[pipeline.tasks]]`,
        `use = "../lib/tasks.ts#double"`,
        `[[pipeline.tasks]]`,
        `use = "../lib/tasks.ts#add"`,
        `args = [10]`,
        `[[pipeline.tasks]]`,
        `use = "writeJsonl"`,
        `args = ["out.jsonl"]`,
        `[source]`,
        `range = { n = 3 }`
      ].join("\n"))
      const r = yield* assay(["run", "-c", file, "--store", ":memory:"])
      assert.strictEqual(r.code, 0, r.stderr)
      assert.deepStrictEqual(fs.readFileSync(path.join(dir, "conf/out.jsonl"), "utf8").trim().split("\n").sort(), ["10", "12", "14"])
      const typo = write(dir, "conf/t.json", JSON.stringify({
        pipeline: { name: "t", tasks: [{ use: "../lib/tasks.ts#dobule" }] },
        source: { range: { n: 1 } }
      }))
      const v = yield* assay(["validate", "-c", typo])
      assert.strictEqual(v.code, 2)
      assert.include(v.stderr, "did you mean ../lib/tasks.ts#double?")
    }))
})
