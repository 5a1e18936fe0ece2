/**
 * The cluster commands' start from their own bundle (`dist/bundle/cluster-<hash>.cjs`,
 * `src/cli/clusterStart.ts`; BENCHMARKS.md bnd17an): `assay migrate` (as `runner` and
 * `--engine cluster`) loads the cluster's module from the bundle, not the ~1,000 module files of
 * `dist/` and `node_modules`, and fails as before when the database cannot be reached; a
 * cluster command whose config names user code still starts on the unbundled runtime. Which
 * module files a process loads is seen through Node's module hooks, registered by a
 * `--import` preload that logs every URL it loads (the bundle itself is a script, never
 * imported). A bundle whose `require("pg")` fails goes on on the unbundled runtime. The
 * bundle's loader gives the cluster's modules and refuses anything else.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { loader } from "../../src/cli/clusterStart.js"
import { NeedsFullRuntime } from "../../src/layers/ModuleLoader.js"
import { assay, root, tempDir, write } from "../support/cli.js"

/** An unreachable database (nothing listens on port 1): the command stops at its connection. */
const nowhere = "postgres://assay@127.0.0.1:1/nowhere"

/** Writes a preload registering hooks that append each loaded URL to `log`; gives its `NODE_OPTIONS`. */
const logLoads = (dir: string, log: string): string => {
  const hooks = write(dir, "hooks.mjs", [
    `import * as fs from "node:fs"`,
    `export async function load(url, context, next) {`,
    `  fs.appendFileSync(${JSON.stringify(log)}, url + "\\n")`,
    `  return next(url, context)`,
    `}`
  ].join("\n"))
  const preload = write(dir, "preload.mjs", [
    `import { register } from "node:module"`,
    `register(${JSON.stringify(pathToFileURL(hooks).href)})`
  ].join("\n"))
  return `--import=${pathToFileURL(preload).href}`
}

const dist = (file: string) => pathToFileURL(path.join(root, "dist", file)).href

describe("cluster commands: the cluster bundle", () => {
  it.scopedLive("migrate starts from the bundle (no dist/cli module but the launcher) and fails on the connection as before", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-bundle")
      const log = path.join(dir, "loaded.log")
      const r = yield* assay(["migrate", "--database", nowhere], { cwd: dir, env: { NODE_OPTIONS: logLoads(dir, log) } })
      assert.strictEqual(r.code, 1, r.stderr)
      assert.include(r.stderr, "cannot connect to postgres://assay@127.0.0.1:1/nowhere")
      const loaded = fs.readFileSync(log, "utf8").trim().split("\n")
      assert.include(loaded, dist("cli/launcher.js"))
      assert.notInclude(loaded, dist("cli/ClusterRun.js"))
      assert.notInclude(loaded, dist("cli/main.js"))
      assert.isFalse(loaded.some((u) => u.includes("/node_modules/@effect/cluster/")), "no @effect/cluster module file loaded")
    }))

  it.scopedLive("when the bundle cannot require pg, migrate goes on on the unbundled runtime and fails on the connection as before", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-bundle-nopg")
      const log = path.join(dir, "loaded.log")
      // `require("pg")` fails (the bundle's); the unbundled runtime imports it as an ES module
      const nopg = write(dir, "nopg.cjs", [
        `const Module = require("node:module")`,
        `const resolve = Module._resolveFilename`,
        `Module._resolveFilename = function (request, ...rest) {`,
        `  if (request === "pg") throw Object.assign(new Error("Cannot find module 'pg'"), { code: "MODULE_NOT_FOUND" })`,
        `  return resolve.call(this, request, ...rest)`,
        `}`
      ].join("\n"))
      const r = yield* assay(["migrate", "--database", nowhere], {
        cwd: dir,
        env: { NODE_OPTIONS: `--require=${nopg} ${logLoads(dir, log)}` }
      })
      assert.strictEqual(r.code, 1, r.stderr)
      assert.include(r.stderr, "cannot connect to postgres://assay@127.0.0.1:1/nowhere")
      assert.include(fs.readFileSync(log, "utf8").trim().split("\n"), dist("cli/ClusterRun.js"))
    }))

  it.scopedLive("a runner whose config names ./tasks.ts starts on the unbundled runtime and loads the task module", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("cluster-bundle-user")
      const log = path.join(dir, "loaded.log")
      write(dir, "tasks.ts", "export const marker = 1\n")
      write(dir, "exp.json", JSON.stringify({
        pipeline: { name: "p", tasks: [{ use: "./tasks.ts#first" }] },
        source: { range: { n: 1 } }
      }))
      const r = yield* assay(["runner", "-c", "exp.json", "--database", nowhere], {
        cwd: dir,
        env: { NODE_OPTIONS: logLoads(dir, log) },
        killAfterMs: 60_000
      })
      assert.notStrictEqual(r.code, 0, r.stderr)
      const loaded = fs.readFileSync(log, "utf8").trim().split("\n")
      assert.include(loaded, dist("cli/main.js"))
      assert.include(loaded, dist("cli/ClusterRun.js"))
    }))
})

describe("clusterStart.loader", () => {
  it.effect("gives the cluster's module from next to it; a user module (any other URL) dies with NeedsFullRuntime", () =>
    Effect.gen(function*() {
      const clusterRun = new URL("../../src/cli/ClusterRun.js", import.meta.url).href
      const m = yield* loader.load(clusterRun)
      assert.strictEqual(typeof m["migrateCluster"], "function")
      const user = pathToFileURL(path.join(root, "tasks.ts")).href
      const exit = yield* Effect.exit(loader.load(user))
      assert.isTrue(Exit.isFailure(exit))
      const defect = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.dieOption(exit.cause)) : undefined
      assert.instanceOf(defect, NeedsFullRuntime)
      assert.strictEqual((defect as NeedsFullRuntime).url, user)
    }))
})
