/**
 * Issue 12 §7: `assay plugins -c FILE` reads the experiment file with the loader's own reader
 * (`Experiment.read`), so a file that cannot be parsed ends as `validate` ends: exit 2 and the
 * same compiler-style message (`file:line:column`, the line, a caret), never exit 1 with a raw
 * stack trace. Spawned `bin/assay`, as a user runs it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { assay, tempDir, write } from "../support/cli.js"

/** The `error: ...` block of a command's stderr, from its first line to the end. */
const errorBlock = (stderr: string): string => stderr.slice(stderr.indexOf("error: ")).trim()

describe("assay plugins -c on a broken experiment file", () => {
  it.scopedLive("a syntax error (JSON, TOML, YAML) exits 2 with validate's message, no stack trace", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("plugins-config")
      const files = [
        write(dir, "broken.json", `{\n  "plugins": ["./a.ts"]\n  "pipeline": {}\n}\n`),
        write(dir, "broken.toml", `plugins = ["./a.ts"\n[pipeline]\n`),
        write(dir, "broken.yaml", `plugins: [./a.ts\npipeline: {}\n`)
      ]
      for (const file of files) {
        const validate = yield* assay(["validate", "-c", file])
        const plugins = yield* assay(["plugins", "-c", file])
        assert.strictEqual(validate.code, 2, validate.stderr)
        assert.strictEqual(plugins.code, 2, `${file}:\n${plugins.stdout}${plugins.stderr}`)
        assert.notMatch(plugins.stderr, /\n\s+at /, "no stack trace")
        assert.include(plugins.stderr, `error: ${file}:`)
        // the same message as validate's, line, column and caret included
        assert.strictEqual(errorBlock(plugins.stderr), errorBlock(validate.stderr))
        assert.strictEqual(plugins.stdout, "", "nothing listed")
      }
    }))

  it.scopedLive("an unknown suffix and a module without a default export exit 2 too; a valid file still lists", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("plugins-config")
      const odd = write(dir, "exp.ini", "plugins = x\n")
      const r1 = yield* assay(["plugins", "-c", odd])
      assert.strictEqual(r1.code, 2, r1.stderr)
      assert.include(r1.stderr, `unknown experiment format ".ini"`)
      const mod = write(dir, "exp.mjs", "export const plugins = []\n")
      const r2 = yield* assay(["plugins", "-c", mod])
      assert.strictEqual(r2.code, 2, r2.stderr)
      assert.include(r2.stderr, "the module has no default export")
      const ok = write(dir, "ok.json", JSON.stringify({ plugins: [], pipeline: { name: "p", tasks: [{ use: "echo" }] } }))
      const r3 = yield* assay(["plugins", "-c", ok, "--json"])
      assert.strictEqual(r3.code, 0, r3.stderr)
      assert.deepStrictEqual(JSON.parse(r3.stdout).plugins, [])
    }))
})
