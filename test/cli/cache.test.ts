/**
 * The call cache as a user meets it: `bin/assay run --cache` (the run's store) and
 * `--cache-db PATH` (a shared cache file, also shared by two processes at once), against the
 * mock LLM answering randomly, and what `assay report` says about it.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, count, tempDir, write } from "../support/cli.js"

const KEY = "sk-cli-cache-5e4d3c2b1a09"

const randomMock = Effect.gen(function*() {
  const profile = yield* MockLlm.decodeProfile({
    seed: 3,
    endpoints: [{ name: "rnd", latency: { medianMs: 0 }, answers: { random: true } }]
  })
  return yield* MockLlm.serve({ profile })
}).pipe(Effect.provide(NodeContext.layer))

/** An experiment of 4 rows × `repeats` chat calls to the mock, written into `dir`. */
const experiment = (dir: string, name: string, baseUrl: string, repeats: number) => {
  write(dir, "rows.jsonl", ["alpha", "beta", "gamma", "delta"].map((w) => JSON.stringify({ prompt: `tell me about ${w}` })).join("\n"))
  return write(dir, name, {
    pools: {
      llm: { resources: [{ id: "rnd", capacity: 4, options: { baseUrl, model: "mock-spam-1", apiKeyEnv: "CACHE_TEST_KEY" } }] }
    },
    pipeline: { name: "sample", tasks: [{ use: "chat", options: { temperature: 1 } }] },
    source: { jsonl: { path: "rows.jsonl" }, repeats }
  })
}

describe("assay run --cache", () => {
  it.scopedLive("the run's store, a shared cache db, repeats raised, two processes at once, and the report", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = yield* tempDir("cache")
      const baseUrl = server.endpoints[0]!.baseUrl
      const exp5 = experiment(dir, "exp5.json", baseUrl, 5)
      const exp7 = experiment(dir, "exp7.json", baseUrl, 7)
      const env = { CACHE_TEST_KEY: KEY }
      const calls = Effect.map(server.log, (log) => log.filter((e) => e.status === 200).length)
      const run = (args: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const before = yield* calls
          const r = yield* assay(["run", "--quiet", "--summary", "json", ...args], { cwd: dir, env, killAfterMs: 60_000 })
          assert.strictEqual(r.code, 0, r.stderr)
          return { calls: (yield* calls) - before, summary: JSON.parse(r.stdout) as { stats: { pipelines: { byState: { succeeded: number } } } } }
        })

      // the cache in the run's own store: a rerun of the succeeded pipelines asks nothing
      const a = yield* run(["-c", exp5, "--store", "own.db", "--cache"])
      assert.strictEqual(a.calls, 20)
      assert.strictEqual(count(NodePath.join(dir, "own.db"), "SELECT count(*) FROM call_cache"), 20)
      const b = yield* run(["-c", exp5, "--store", "own.db", "--cache", "--retry-succeeded"])
      assert.strictEqual(b.calls, 0)
      assert.strictEqual(b.summary.stats.pipelines.byState.succeeded, 20)
      // without --cache the same rerun calls the model again
      const c = yield* run(["-c", exp5, "--store", "own.db", "--retry-succeeded"])
      assert.strictEqual(c.calls, 20)

      // a shared cache file: new stores, same cache
      const first = yield* run(["-c", exp5, "--store", "s1.db", "--cache-db", "shared.db"])
      assert.strictEqual(first.calls, 20)
      const rerun = yield* run(["-c", exp5, "--store", "s2.db", "--cache-db", "shared.db"])
      assert.strictEqual(rerun.calls, 0)
      const more = yield* run(["-c", exp7, "--store", "s3.db", "--cache-db", "shared.db"])
      assert.strictEqual(more.calls, 8)
      assert.strictEqual(more.summary.stats.pipelines.byState.succeeded, 28)
      // refresh calls every request again (readOnly: test/cli/cache-flags.test.ts)
      // a missing readOnly cache (a misspelt path) is refused, not read as an empty one, and
      // nothing is created, not even the file
      const missing = yield* assay(["run", "--quiet", "-c", exp7, "--store", "s4b.db", "--cache-db", "other.db", "--cache-mode", "readOnly"], { cwd: dir, env })
      assert.strictEqual(missing.code, 2, missing.stderr)
      assert.include(missing.stderr, "the file does not exist")
      assert.strictEqual(fs.existsSync(NodePath.join(dir, "other.db")), false)
      assert.strictEqual(fs.existsSync(NodePath.join(dir, "s4b.db")), false)
      const fresh = yield* run(["-c", exp7, "--store", "s5.db", "--cache-db", "shared.db", "--cache-mode", "refresh"])
      assert.strictEqual(fresh.calls, 28)
      assert.strictEqual(count(NodePath.join(dir, "shared.db"), "SELECT count(*) FROM call_cache"), 28)

      // what the report says of the rerun: 20 hits, no call, tokens saved
      const report = yield* assay(["report", "s2.db"], { cwd: dir })
      assert.strictEqual(report.code, 0, report.stderr)
      assert.match(report.stdout, /Call cache: hits 20, misses 0; saved [1-9]\d* tokens/)
      const json = yield* assay(["report", "s3.db", "--json"], { cwd: dir })
      const data = JSON.parse(json.stdout) as { cache: { hits: number; misses: number } }
      assert.deepStrictEqual([data.cache.hits, data.cache.misses], [20, 8])

      // two processes on one new shared cache file at the same moment: both succeed, every
      // request is in the cache afterwards, and a third run asks nothing
      const both = yield* Effect.all([
        run(["-c", exp7, "--store", "p1.db", "--cache-db", "race.db"]),
        run(["-c", exp7, "--store", "p2.db", "--cache-db", "race.db"])
      ], { concurrency: 2 })
      for (const r of both) assert.strictEqual(r.summary.stats.pipelines.byState.succeeded, 28)
      assert.strictEqual(count(NodePath.join(dir, "race.db"), "SELECT count(*) FROM call_cache"), 28)
      const third = yield* run(["-c", exp7, "--store", "p3.db", "--cache-db", "race.db"])
      assert.strictEqual(third.calls, 0)

      // no byte of the key in any file the runs left
      for (const f of fs.readdirSync(dir)) {
        assert.strictEqual(fs.readFileSync(NodePath.join(dir, f)).indexOf(KEY), -1, `${f} holds the key`)
      }
    }), { timeout: 180_000 })

  it.scopedLive("a bad cache setting is a config error naming the field (exit 2)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cache-bad")
      const exp = write(dir, "exp.json", {
        run: { cache: { mode: "sometimes" } },
        pipeline: { name: "p", tasks: [{ use: "echo" }] },
        source: { range: { n: 1 } }
      })
      const r = yield* assay(["run", "-c", exp, "--quiet"], { cwd: dir })
      assert.strictEqual(r.code, 2)
      assert.include(r.stderr, "run.cache")
      const ok = write(dir, "ok.json", { pipeline: { name: "p", tasks: [{ use: "echo" }] }, source: { range: { n: 1 } } })
      const ttl = yield* assay(["run", "-c", ok, "--quiet", "--cache", "--cache-ttl", "soon"], { cwd: dir })
      assert.strictEqual(ttl.code, 2)
      assert.include(ttl.stderr, "--cache-ttl")
    }))
})

describe("assay resume and the call cache of the run it resumes (issue 18, F6)", () => {
  it.scopedLive("carried over from the stored run and said once; a cache flag given at resume overrides it, said once", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = yield* tempDir("cache-resume")
      const exp = experiment(dir, "exp.json", server.endpoints[0]!.baseUrl, 2)
      const env = { CACHE_TEST_KEY: KEY }
      const shared = NodePath.join(dir, "shared.db")
      // a run with a shared cache database that did only part of the work (2 of 4 rows)
      const first = yield* assay(["run", "-c", exp, "--store", "s.db", "--cache-db", "shared.db", "--limit", "2", "--quiet"], {
        cwd: dir,
        env,
        killAfterMs: 60_000
      })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.strictEqual(count(shared, "SELECT count(*) FROM call_cache"), 4)
      // resume with no cache flag: the shared database of that run is used again, and said
      const resumed = yield* assay(["resume", "-c", exp, "--store", "s.db", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(resumed.code, 0, resumed.stderr)
      const carried = resumed.stderr.split("\n").filter((l) => l.startsWith("resume: the call cache of run"))
      assert.strictEqual(carried.length, 1, resumed.stderr)
      assert.include(carried[0]!, `carries over (mode readWrite, db ${fs.realpathSync(dir)}`)
      assert.strictEqual(count(shared, "SELECT count(*) FROM call_cache"), 8)
      // a flag given at resume wins, and the resume says what it replaced
      const off = yield* assay(["resume", "-c", exp, "--store", "s.db", "--cache-mode", "off", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(off.code, 0, off.stderr)
      const overridden = off.stderr.split("\n").filter((l) => l.startsWith("resume: the cache flags given override"))
      assert.strictEqual(overridden.length, 1, off.stderr)
      assert.include(overridden[0]!, "now mode off")
    }))

  it.scopedLive("a cache flag at resume replaces only its own field: --cache-ttl keeps the run's shared database (tester18c F2)", () =>
    Effect.gen(function*() {
      const server = yield* randomMock
      const dir = yield* tempDir("cache-resume-ttl")
      const exp = experiment(dir, "exp.json", server.endpoints[0]!.baseUrl, 2)
      const env = { CACHE_TEST_KEY: KEY }
      const shared = NodePath.join(dir, "shared.db")
      const first = yield* assay(["run", "-c", exp, "--store", "s.db", "--cache-db", "shared.db", "--limit", "1", "--quiet"], {
        cwd: dir,
        env,
        killAfterMs: 60_000
      })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.strictEqual(count(shared, "SELECT count(*) FROM call_cache"), 2)
      const ttl = yield* assay(["resume", "-c", exp, "--store", "s.db", "--cache-ttl", "1 hour", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(ttl.code, 0, ttl.stderr)
      // the resume's answers went into the shared database, not the run's store
      assert.strictEqual(count(shared, "SELECT count(*) FROM call_cache"), 8)
      assert.strictEqual(count(NodePath.join(dir, "s.db"), "SELECT count(*) FROM call_cache"), 0)
      // and the notice says where answers go now
      const said = ttl.stderr.split("\n").filter((l) => l.startsWith("resume: the cache flags given override"))
      assert.strictEqual(said.length, 1, ttl.stderr)
      assert.include(said[0]!, `now mode readWrite, db ${fs.realpathSync(dir)}`)
      assert.include(said[0]!, "ttl 1h")
      // `--cache` alone, on a run whose cache lived in its store: said as the store
      const own = yield* assay(["run", "-c", exp, "--store", "own.db", "--limit", "1", "--cache-ttl", "1 hour", "--cache", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(own.code, 0, own.stderr)
      const again = yield* assay(["resume", "-c", exp, "--store", "own.db", "--cache-mode", "readOnly", "--quiet"], { cwd: dir, env, killAfterMs: 60_000 })
      assert.strictEqual(again.code, 0, again.stderr)
      assert.include(again.stderr, "now mode readOnly, in the run's store, ttl 1h")
    }), 240_000)
})
