/**
 * `npm run docs` type-checks every JSDoc `@example` against the built package, so a broken
 * example fails the docs build (and CI), naming the file and line of its docstring.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { exec, tempDir } from "../support/cli.js"

const good = `/**
 * Doubles.
 *
 * @example
 * \`\`\`ts
 * import { Task } from "assay"
 * const double = Task.sync("double", (n: number) => n * 2)
 * \`\`\`
 */
export const x = 1
`

const broken = `/**
 * A chain whose types do not fit.
 *
 * @example
 * \`\`\`ts
 * import { Pipeline, Task } from "assay"
 * const count = Task.sync("count", (s: string) => s.length)
 * const shout = Task.sync("shout", (s: string) => s.toUpperCase())
 * export const p = Pipeline.make("p", count, shout)
 * \`\`\`
 */
export const y = 2
`

describe("npm run docs: the @example check", { timeout: 180_000 }, () => {
  it.scopedLive("passes good examples, fails a broken one with its docstring's file and line", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("docs")
      fs.writeFileSync(path.join(dir, "good.ts"), good)
      const ok = yield* exec(process.execPath, ["scripts/docs.mjs", "--no-html", `--src=${dir}`])
      assert.strictEqual(ok.code, 0, ok.stderr)
      assert.include(ok.stdout, "1 @example blocks type-check")

      fs.writeFileSync(path.join(dir, "broken.ts"), broken)
      const failed = yield* exec(process.execPath, ["scripts/docs.mjs", "--no-html", `--src=${dir}`])
      assert.strictEqual(failed.code, 1)
      assert.include(failed.stderr, "does not type-check")
      assert.match(failed.stderr, /broken\.ts:4 \(@example line \d+\)/)

      fs.writeFileSync(path.join(dir, "unfenced.ts"), "/**\n * @example\n * foo()\n */\nexport const z = 3\n")
      fs.rmSync(path.join(dir, "broken.ts"))
      const unfenced = yield* exec(process.execPath, ["scripts/docs.mjs", "--no-html", `--src=${dir}`])
      assert.strictEqual(unfenced.code, 1)
      assert.include(unfenced.stderr, "unfenced.ts:2: an @example must be a fenced")
    }))
})
