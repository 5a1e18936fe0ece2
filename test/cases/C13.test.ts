/**
 * Case C13 (../shared/cases/README.md): a key read from a file, with its trailing newline
 * (`MY_KEY=$'sk-test-123\n'`), and an unset key variable under `--strict-env`.
 *
 * `validate` (with and without `--strict-env`) and `run` refuse at once, exit 2, naming the
 * variable and never printing the key; `run` creates no store and sends nothing. Before the
 * fix `validate` passed and `run` spent its retries on "connection" errors (the header value
 * was refused by the HTTP client), degrading the endpoint. `--strict-env` also refuses an
 * unset variable named by `apiKeyEnv` (before: it passed, and every pipeline then failed one
 * by one).
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
})
