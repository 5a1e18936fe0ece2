/**
 * Case C13 (../shared/cases/README.md): a key read from a file, with its trailing newline
 * (`MY_KEY=$'sk-test-123\n'`), and an unset key variable under `--strict-env`.
 *
 * `validate` (with and without `--strict-env`) and `run` refuse at once, exit 2, naming the
 * variable and never printing the key; `run` creates no store and sends nothing. Before the
 * fix `validate` passed and `run` spent its retries on "connection" errors (the header value
 * was refused by the HTTP client), degrading the endpoint. `--strict-env` also refuses an
 * unset variable named by `apiKeyEnv` (before: it passed, and every pipeline then failed one
 * by one). An inline `apiKey: "${VAR}"` whose variable is unset is the same unset key as
 * `apiKeyEnv: VAR` (tester18g F5: it was sent as no key, a 401 per pipeline).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { assay, chatExperiment, loopbackServer, tmp, write } from "./support.js"

describe("C13: a key read from a file", () => {
  it.live("a trailing newline: validate, validate --strict-env and run exit 2 naming MY_KEY, never the key", () =>
    Effect.promise(async () => {
      const dir = tmp()
      let requests = 0
      const server = await loopbackServer((_req, res) => {
        requests++
        res.writeHead(500).end()
      })
      try {
        const store = path.join(dir, "c13.db")
        const file = write(dir, "c13.json", chatExperiment({
          store,
          n: 3,
          resources: [{ id: "k", options: { baseUrl: `${server.url}/v1`, model: "m", apiKeyEnv: "MY_KEY" } }]
        }))
        const env = { MY_KEY: "sk-test-123\n" }
        for (const args of [["validate", "-c", file], ["validate", "-c", file, "--strict-env"], ["run", "-c", file]]) {
          const r = await assay(args, env)
          assert.strictEqual(r.code, 2, `${args.join(" ")}: ${r.stderr}`)
          assert.include(r.stderr, "pools.llm.resources[0].options.apiKeyEnv")
          assert.include(r.stderr, "MY_KEY holds whitespace or control characters")
          assert.notInclude(r.stdout + r.stderr, "sk-test-123")
        }
        assert.isFalse(fs.existsSync(store), "run refused before opening a store")
        assert.strictEqual(requests, 0)
        // the same key in the options themselves (not advised, but refused the same way)
        const inline = write(dir, "inline.json", chatExperiment({
          store,
          n: 1,
          resources: [{ id: "k", options: { baseUrl: `${server.url}/v1`, model: "m", apiKey: "sk-inline-9\t" } }]
        }))
        const v = await assay(["validate", "-c", inline])
        assert.strictEqual(v.code, 2)
        assert.include(v.stderr, "pools.llm.resources[0].options.apiKey")
        assert.notInclude(v.stdout + v.stderr, "sk-inline-9")
      } finally {
        await server.close()
      }
    }), 60_000)

  it.live("--strict-env checks every variable named by apiKeyEnv; without it an unset key is left to the run", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const file = write(dir, "unset.json", chatExperiment({
        store: path.join(dir, "unset.db"),
        n: 1,
        resources: [{ id: "k", options: { baseUrl: "http://127.0.0.1:9/v1", model: "m", apiKeyEnv: "MY_UNSET_KEY" } }]
      }))
      const strict = await assay(["validate", "-c", file, "--strict-env"], { MY_UNSET_KEY: undefined })
      assert.strictEqual(strict.code, 2, strict.stderr)
      assert.include(strict.stderr, "environment variable MY_UNSET_KEY (the key) is not set (--strict-env)")
      const empty = await assay(["validate", "-c", file, "--strict-env"], { MY_UNSET_KEY: "" })
      assert.strictEqual(empty.code, 2)
      assert.include(empty.stderr, "MY_UNSET_KEY (the key) is empty")
      const lax = await assay(["validate", "-c", file], { MY_UNSET_KEY: undefined })
      assert.strictEqual(lax.code, 0, lax.stderr)
      const ok = await assay(["validate", "-c", file, "--strict-env"], { MY_UNSET_KEY: "sk-fine" })
      assert.strictEqual(ok.code, 0, ok.stderr)
    }), 60_000)

  it.live("an inline apiKey: \"${VAR}\" whose variable is unset is an unset key, as apiKeyEnv: the specific warning, nothing sent (tester18g F5)", () =>
    Effect.promise(async () => {
      const dir = tmp()
      const seen: Array<string | undefined> = []
      const server = await loopbackServer((req, res) => {
        seen.push(req.headers.authorization)
        res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "missing API key" } }))
      })
      try {
        const outcome = async (name: string, options: Record<string, unknown>) => {
          const store = path.join(dir, `${name}.db`)
          const file = write(dir, `${name}.json`, chatExperiment({
            store,
            n: 3,
            resources: [{ id: "k", options: { baseUrl: `${server.url}/v1`, model: "m", ...options } }]
          }))
          const before = seen.length
          const r = await assay(["run", "-c", file], { MY_INLINE_KEY: undefined })
          const exported = await assay(["export", store, "-", "--rows", "attempts", "--format", "jsonl"], {})
          return { r, requests: seen.length - before, exported }
        }
        const inline = await outcome("inline", { apiKey: "${MY_INLINE_KEY}" })
        const byName = await outcome("byname", { apiKeyEnv: "MY_INLINE_KEY" })
        for (const [what, o, at] of [
          ["inline", inline, "pools.llm.resources[0].options.apiKey"],
          ["apiKeyEnv", byName, "pools.llm.resources[0].options.apiKeyEnv"]
        ] as const) {
          assert.strictEqual(o.requests, 0, `${what}: no request sent`)
          assert.strictEqual(o.r.code, 1, `${what}: ${o.r.stderr}`)
          assert.include(o.r.stderr, `warning: ${at}: environment variable MY_INLINE_KEY (the key) is not set: every call to this resource will fail`)
          assert.notInclude(o.r.stderr, "expands to")
          assert.include(o.r.stdout + o.r.stderr, "pipelines: 3 (failed 3)")
        }
        // the same typed failure in both stores
        const errorsOf = (text: string) => [
          ...new Set(text.split("\n").filter((l) => l.startsWith("{")).map((l) => {
            const a = JSON.parse(l) as { outcome: string; errorClass: string; errorType: string; errorMessage: string }
            return `${a.outcome} ${a.errorClass} ${a.errorType}: ${a.errorMessage}`
          }))
        ]
        assert.deepStrictEqual(errorsOf(inline.exported.stdout), errorsOf(byName.exported.stdout))
        assert.deepStrictEqual(errorsOf(inline.exported.stdout), [
          "failed fatal ChatError: chat endpoint of resource k: the environment variable MY_INLINE_KEY is not set"
        ])
        // set: the key is sent as written
        const set = write(dir, "set.json", chatExperiment({
          store: path.join(dir, "set.db"),
          n: 1,
          resources: [{ id: "k", options: { baseUrl: `${server.url}/v1`, model: "m", apiKey: "${MY_INLINE_KEY}" } }]
        }))
        const before = seen.length
        const withKey = await assay(["run", "-c", set], { MY_INLINE_KEY: "sk-inline-set-0042" })
        assert.notInclude(withKey.stdout + withKey.stderr, "sk-inline-set-0042")
        assert.isAbove(seen.length, before)
        assert.strictEqual(seen[before], "Bearer sk-inline-set-0042")
      } finally {
        await server.close()
      }
    }), 120_000)
})
