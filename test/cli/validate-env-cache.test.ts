/**
 * `assay validate` as tester18c read it (issue 18): an `apiKeyEnv` variable that is unset is an
 * unresolved variable (F6: `unresolved env: none` was printed above the warning that it is
 * unset), and `run.cache.db` is shown resolved to its absolute path beside its text as written
 * (F9: the relative or `${VAR}` text only).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as NodePath from "node:path"
import { assay, tempDir, write } from "../support/cli.js"

describe("assay validate: unresolved env and the cache file", () => {
  it.scopedLive("an unset key variable is unresolved env; run.cache.db resolved and as written, in text and JSON", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("validate-env")
      fs.mkdirSync(NodePath.join(dir, "caches"))
      write(dir, "rows.jsonl", `{"prompt":"hi"}\n`)
      const file = write(dir, "exp.json", {
        pools: {
          llm: { resources: [{ id: "a", capacity: 1, options: { baseUrl: "http://127.0.0.1:9/v1", model: "m", apiKeyEnv: "F18V_TEST_NO_KEY" } }] }
        },
        pipeline: { name: "p", tasks: [{ use: "chat" }] },
        source: { jsonl: { path: "rows.jsonl" } },
        run: { cache: { db: "${F18V_CACHE_DIR}/shared.db" } }
      })
      const env = { F18V_CACHE_DIR: "caches" }
      const text = yield* assay(["validate", "-c", file], { cwd: dir, env })
      assert.strictEqual(text.code, 0, text.stderr)
      assert.include(text.stdout, "unresolved env: F18V_TEST_NO_KEY (at pools.llm.resources[0].options.apiKeyEnv)")
      assert.notInclude(text.stdout, "unresolved env: none")
      assert.include(text.stderr, "environment variable F18V_TEST_NO_KEY (the key) is not set")
      assert.include(text.stdout, `call cache db: ${NodePath.join(dir, "caches", "shared.db")} (written \${F18V_CACHE_DIR}/shared.db)`)
      const json = yield* assay(["validate", "-c", file, "--json"], { cwd: dir, env })
      assert.strictEqual(json.code, 0, json.stderr)
      const d = JSON.parse(json.stdout) as { unresolvedEnv: Array<{ name: string; path: string }>; cacheDb: { path: string; written: string } }
      assert.deepStrictEqual(d.unresolvedEnv, [{ name: "F18V_TEST_NO_KEY", path: "pools.llm.resources[0].options.apiKeyEnv" }])
      assert.deepStrictEqual(d.cacheDb, { path: NodePath.join(dir, "caches", "shared.db"), written: "${F18V_CACHE_DIR}/shared.db" })
      // with the key set: nothing unresolved
      const keyed = yield* assay(["validate", "-c", file], { cwd: dir, env: { ...env, F18V_TEST_NO_KEY: "sk-test-0123456789" } })
      assert.include(keyed.stdout, "unresolved env: none")
    }))
})
