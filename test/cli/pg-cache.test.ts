/**
 * `assay run --cache` on a Postgres store: the cached outputs live in the store's database
 * (`assay_call_cache`), so a later run (another process) asks the model nothing for them. Before,
 * the cache of a Postgres run silently lived in memory and was lost with the process.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as PgStore from "../../src/layers/PgStore.js"
import * as MockLlm from "../../src/services/MockLlm.js"
import { assay, tempDir, write } from "../support/cli.js"
import { type PgServer, startPostgres } from "../support/postgres.js"

let pg: PgServer
beforeAll(async () => {
  pg = await startPostgres()
}, 120_000)
afterAll(async () => {
  await pg?.stop()
}, 60_000)

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
