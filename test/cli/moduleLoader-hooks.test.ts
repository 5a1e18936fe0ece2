/**
 * The CLI's module loader (`ModuleLoader.registering`, as built in `dist/`) loads assay's own
 * module graph (its `index`) before it registers the resolution hooks: once hooks are
 * registered, every module load goes through them (Node's hooks thread), which doubled the CPU
 * time of the ~1,000 modules of assay, effect and @effect/* (BENCHMARKS.md, ci20). Checked in
 * a plain `node` process (no test runner's loader in between) with stand-ins: an `index` that
 * imports a second module, hooks that log each module they load and resolve `assay` to the
 * index, a user module importing `assay`. A user module that does not name `assay` has
 * nothing loaded ahead of it. A module under the index's directory (the CLI's own, as
 * `cli/ClusterRun.js` next to `dist/index.js`) is imported with no hooks registered at all.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { exec, root, tempDir, write } from "../support/cli.js"

/** A `main.mjs` text that loads `module` through `registering` with `hooks` and `index` (file URLs) and prints its `seen`. */
const mainOf = (hooks: string, index: string, module: string) =>
  [
    `import { Effect } from ${JSON.stringify(pathToFileURL(path.join(root, "node_modules/effect/dist/esm/index.js")).href)}`,
    `import { registering } from ${JSON.stringify(pathToFileURL(path.join(root, "dist/layers/ModuleLoader.js")).href)}`,
    `const loader = registering({ hooks: ${JSON.stringify(hooks)}, index: ${JSON.stringify(index)} })`,
    `const m = await Effect.runPromise(loader.load(${JSON.stringify(module)}))`,
    `console.log(m.seen)`
  ].join("\n")

/** A hooks module that appends each URL it loads to `log`, with `more` lines (its other hooks) before the `load` hook. */
const hooksOf = (log: string, more: ReadonlyArray<string>) =>
  [
    `import * as fs from "node:fs"`,
    ...more,
    `export async function load(url, context, next) {`,
    `  fs.appendFileSync(${JSON.stringify(log)}, url + "\\n")`,
    `  return next(url, context)`,
    `}`
  ].join("\n")

describe("ModuleLoader.registering", () => {
  it.scopedLive("loads the index's module graph before registering the hooks; the user's module goes through them", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("loader-hooks")
      const log = path.join(dir, "loaded.log")
      // the index and its graph in a directory of their own (as `dist/`), the user's modules beside it
      write(dir, "dist/dep.mjs", "export const dep = 1\n")
      write(dir, "dist/index.mjs", "export { dep } from './dep.mjs'\nexport const marker = 'index'\nglobalThis.indexLoaded = true\n")
      write(dir, "user.mjs", "import { marker, dep } from 'assay'\nexport const seen = marker + dep\n")
      write(dir, "other.mjs", "export const seen = globalThis.indexLoaded === true ? 'index loaded' : 'no index'\n")
      write(dir, "hooks.mjs", hooksOf(log, [
        `let index = ""`,
        `export async function initialize(data) { index = data.index }`,
        `export async function resolve(specifier, context, next) {`,
        `  return next(specifier === "assay" ? index : specifier, context)`,
        `}`
      ]))
      const url = (name: string) => pathToFileURL(path.join(dir, name)).href
      const main = (user: string) => write(dir, "main.mjs", mainOf(url("hooks.mjs"), url("dist/index.mjs"), url(user)))
      const r = yield* exec(process.execPath, [main("user.mjs")], { cwd: dir })
      assert.strictEqual(r.code, 0, r.stderr)
      assert.strictEqual(r.stdout.trim(), "index1")
      const loaded = fs.readFileSync(log, "utf8").trim().split("\n")
      assert.include(loaded, url("user.mjs"))
      assert.notInclude(loaded, url("dist/index.mjs"))
      assert.notInclude(loaded, url("dist/dep.mjs"))

      fs.rmSync(log)
      const other = yield* exec(process.execPath, [main("other.mjs")], { cwd: dir })
      assert.strictEqual(other.code, 0, other.stderr)
      assert.strictEqual(other.stdout.trim(), "no index")
      assert.deepStrictEqual(fs.readFileSync(log, "utf8").trim().split("\n"), [url("other.mjs")])
    }))

  it.scopedLive("imports a module of the CLI's own (under the index's directory) without registering the hooks", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("loader-own")
      const log = path.join(dir, "hooks.log")
      write(dir, "dist/index.mjs", "export const marker = 'index'\n")
      write(dir, "dist/dep.mjs", "export const dep = 1\n")
      write(dir, "dist/cli/own.mjs", "import { dep } from '../dep.mjs'\nexport const seen = 'own' + dep\n")
      // the hooks say when they are registered (initialize) and what they load
      write(dir, "hooks.mjs", hooksOf(log, [`export async function initialize() { fs.appendFileSync(${JSON.stringify(log)}, "registered\\n") }`]))
      const url = (name: string) => pathToFileURL(path.join(dir, name)).href
      write(dir, "main.mjs", mainOf(url("hooks.mjs"), url("dist/index.mjs"), url("dist/cli/own.mjs")))
      const r = yield* exec(process.execPath, [path.join(dir, "main.mjs")], { cwd: dir })
      assert.strictEqual(r.code, 0, r.stderr)
      assert.strictEqual(r.stdout.trim(), "own1")
      assert.isFalse(fs.existsSync(log), fs.existsSync(log) ? fs.readFileSync(log, "utf8") : "")
    }))
})
