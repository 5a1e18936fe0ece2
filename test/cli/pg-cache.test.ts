/**
 * `assay run --cache` on a Postgres store: the cached outputs live in the store's database
 * (`assay_call_cache`), so a later run (another process) asks the model nothing for them. Before,
 * the cache of a Postgres run silently lived in memory and was lost with the process. And a run
 * into Postgres killed with SIGKILL resumes without re-running any committed task.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import * as PgStore from "../../src/layers/PgStore.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, tempDir, write } from "../support/cli.js"
import { usePostgres } from "../support/postgres.js"

const BIN = path.resolve(import.meta.dirname, "../../bin/assay")

const pg = usePostgres()

const randomMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 5,
    endpoints: [{ name: "rnd", latency: { medianMs: 0 }, answers: { random: true } }]
  })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

describe("assay run --cache --store postgres://…", () => {
  it.scopedLive("a rerun into the same database is answered from its cache table", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = yield* tempDir("pg-cache")
      const baseUrl = server.endpoints[0]!.baseUrl
      write(dir, "rows.jsonl", ["alpha", "beta", "gamma"].map((w) => JSON.stringify({ prompt: `about ${w}` })).join("\n"))
      const exp = write(dir, "exp.json", {
        pools: {
          llm: { resources: [{ id: "rnd", capacity: 4, options: { baseUrl, model: "mock-1", apiKeyEnv: "PG_CACHE_KEY" } }] }
        },
        pipeline: { name: "sample", tasks: [{ use: "chat", options: { temperature: 1 } }] },
        source: { jsonl: { path: "rows.jsonl" }, repeats: 2 }
      })
      yield* Effect.promise(() => pg.createDatabase("runcache"))
      const url = pg.url("runcache")
      yield* PgStore.migrate(url)
      const calls = Effect.map(server.log, (log) => log.filter((e) => e.status === 200).length)
      const run = (args: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const before = yield* calls
          const r = yield* assay(["run", "--quiet", "--summary", "json", "-c", exp, "--store", url, ...args], {
            cwd: dir,
            env: { PG_CACHE_KEY: "sk-pg-cache-1" },
            killAfterMs: 90_000
          })
          assert.strictEqual(r.code, 0, r.stderr)
          return (yield* calls) - before
        })
      assert.strictEqual(yield* run(["--cache"]), 6)
      assert.strictEqual(pg.psql("runcache", "SELECT count(*) FROM assay_call_cache").trim(), "6")
      // another process, the succeeded pipelines run again: every answer comes from the table
      assert.strictEqual(yield* run(["--cache", "--retry-succeeded"]), 0)
      // without --cache the model is asked again
      assert.strictEqual(yield* run(["--retry-succeeded"]), 6)
    }), { timeout: 240_000 })
})

describe("assay resume --store postgres://… after kill -9", () => {
  it.scopedLive("claims the dead run's pipelines (--resume), re-runs no committed task; merge reads the database", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("pg-kill")
      const n = 60
      const exp = write(dir, "exp.json", {
        run: { concurrency: 8 },
        pipeline: {
          name: "k",
          tasks: [0, 1, 2].map(() => ({ use: "delay", args: ["40 millis"] }))
        },
        source: { range: { n } }
      })
      yield* Effect.promise(() => pg.createDatabase("kill9"))
      const url = pg.url("kill9")
      yield* PgStore.migrate(url)
      const count = (q: string) => Number(pg.psql("kill9", q).trim())
      const proc = spawn(BIN, ["run", "--quiet", "-c", exp, "--store", url], { cwd: dir, stdio: "ignore" })
      const exited = new Promise<void>((resolve) => proc.on("exit", () => resolve()))
      yield* Effect.addFinalizer(() => Effect.sync(() => proc.kill("SIGKILL")))
      const start = Date.now()
      while (count("SELECT count(*) FROM assay_checkpoints") < 30) {
        assert.isBelow(Date.now() - start, 60_000, "the run committed nothing in 60 s")
        yield* Effect.sleep("20 millis")
      }
      proc.kill("SIGKILL")
      yield* Effect.promise(() => exited)
      pg.psql("kill9", "CREATE TABLE snap AS SELECT c.*, (SELECT max(attempt_id) FROM assay_attempts) AS hwm FROM assay_checkpoints c")
      assert.isAbove(count("SELECT count(*) FROM assay_pipelines WHERE state = 'running'"), 0, "killed mid-run")
      // a resume that cannot tell the killed run is dead (heartbeat younger than --stale-after)
      // leaves its pipelines to it, and says so instead of a bare "completed"
      const early = yield* assay(["resume", "-c", exp, "--store", url, "--stale-after", "10 minutes"], {
        cwd: dir,
        killAfterMs: 90_000
      })
      assert.strictEqual(early.code, 0, early.stderr)
      const held = count("SELECT count(*) FROM assay_pipelines WHERE state = 'running'")
      assert.match(early.stdout, new RegExp(`left to run \\S+: ${held} pipeline\\(s\\) it marks running`))
      assert.include(early.stdout, "--stale-after")
      // the dead run is claimable once its heartbeat is older than --stale-after (1 s): until
      // then it may be alive on another host, and a resume leaves its pipelines to it
      const lastBeat = count("SELECT max(heartbeat_at) FROM assay_runs WHERE status = 'running'")
      while (Date.now() - lastBeat < 1_500) yield* Effect.sleep("100 millis")
      const r = yield* assay(["resume", "--quiet", "-c", exp, "--store", url, "--resume", "--stale-after", "1 second"], {
        cwd: dir,
        killAfterMs: 90_000
      })
      assert.strictEqual(r.code, 0, r.stderr)
      assert.strictEqual(count("SELECT count(*) FROM assay_pipelines WHERE state = 'succeeded'"), n)
      // every task committed once: one checkpoint, one output, one succeeded attempt per key
      assert.strictEqual(count("SELECT count(*) FROM assay_checkpoints"), 3 * n)
      assert.strictEqual(count("SELECT count(*) FROM (SELECT 1 FROM assay_artifacts WHERE seq >= 0 GROUP BY pipeline_id, seq HAVING count(*) > 1) d"), 0)
      // nothing committed before the kill ran again (an in-flight attempt of the dead run is a
      // pipeline.abandoned event, no attempt row)
      assert.strictEqual(
        count(
          "SELECT count(*) FROM assay_attempts a JOIN snap s USING (pipeline_id, seq, visit) WHERE a.attempt_id > s.hwm AND a.attempt_no > 0"
        ),
        0
      )
      // `assay merge` reads the Postgres store like a shard file: one row per pipeline
      const merged = yield* assay(["merge", "-o", "merged.jsonl", url], { cwd: dir, killAfterMs: 60_000 })
      assert.strictEqual(merged.code, 0, merged.stderr)
      const lines = fs.readFileSync(path.join(dir, "merged.jsonl"), "utf8").trim().split("\n")
      assert.strictEqual(lines.length, n)
    }), { timeout: 240_000 })
})
